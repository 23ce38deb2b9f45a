// Keyed dropout (ops/dropout.hpp's DropoutKey, nn::Dropout): the fraction dropped and the
// scale, masks that depend on the key and the global row only (so a batch split between calls
// or replicas draws what one call draws), and nn::Dropout under MirroredStrategy dropping, for
// each example, what it drops under OneDeviceStrategy — different masks for different rows.
#include "doctest.hpp"

#include <cmath>
#include <vector>

#include <strata/strata.hpp>

using namespace strata;

namespace {
std::vector<float> rows_of(const Tensor& t, std::int64_t lo, std::int64_t hi) {
  const auto v = t.to_vector<float>();
  const std::int64_t w = t.numel() / t.dim(0);
  return {v.begin() + lo * w, v.begin() + hi * w};
}
}  // namespace

TEST_CASE("Dropout.Keyed.FractionAndScale") {
  const double p = 0.3;
  const Tensor x = ones({400, 250});
  const auto y = dropout(x, p, DropoutKey{1, 2, 0}).to_vector<float>();
  std::int64_t dropped = 0;
  for (float v : y) {
    CHECK((v == 0.0f || v == doctest::Approx(1.0 / (1.0 - p))));
    dropped += v == 0.0f;
  }
  // 100,000 draws: the count is within 5 standard deviations (145 each) of 30,000.
  const double n = static_cast<double>(y.size());
  CHECK(std::fabs(static_cast<double>(dropped) - p * n) < 5 * std::sqrt(n * p * (1 - p)));
  CHECK(dropout(x, p, DropoutKey{1, 2, 0}, /*training=*/false).to_vector<float>() == x.to_vector<float>());
  CHECK(dropout(x, 0.0, DropoutKey{1, 2, 0}).to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_AS(dropout(x, 1.0, DropoutKey{}), invalid_argument);
}

TEST_CASE("Dropout.Keyed.MaskDependsOnKeyAndGlobalRowOnly") {
  Generator g(3);
  const Tensor x = uniform({25, 7}, -1, 1, g);  // 7 features: a partial group of 4 in each row
  const DropoutKey key{11, 5, 0};
  const Tensor whole = dropout(x, 0.5, key);
  // Rows 10..25 in a call of their own, told their first row: the same elements dropped.
  const Tensor part = dropout(data::slice_rows(x, 10, 25), 0.5, DropoutKey{11, 5, 10});
  CHECK(part.to_vector<float>() == rows_of(whole, 10, 25));
  // Another step, seed or row: another mask.
  CHECK(dropout(x, 0.5, DropoutKey{11, 6, 0}).to_vector<float>() != whole.to_vector<float>());
  CHECK(dropout(x, 0.5, DropoutKey{12, 5, 0}).to_vector<float>() != whole.to_vector<float>());
  CHECK(dropout(x, 0.5, DropoutKey{11, 5, 1}).to_vector<float>() != whole.to_vector<float>());
  // Rows of equal inputs draw different masks.
  const Tensor same_rows = dropout(ones({2, 64}), 0.5, key);
  CHECK(rows_of(same_rows, 0, 1) != rows_of(same_rows, 1, 2));
}

TEST_CASE("Dropout.Layer.ReplicasDropWhatOneDeviceDrops") {
  // The layer's output for each example of a global batch of 13 (5, 4 and 4 rows on 3
  // replicas) is what one device's layer gives that example: different masks for different
  // rows, and the same mask for the same global row.
  auto make = [] {
    manual_seed(4);
    return nn::Sequential(nn::Dropout(0.5));
  };
  data::Batch global;
  global.x = ones({13, 32});
  global.y = zeros({13}, DType::i64);
  global.size = global.global_size = 13;
  global.epoch = 2;
  global.index = 7;
  OneDeviceStrategy one;
  auto ref_model = one.scope(make);
  const Tensor ref = one.gather(one.run([&](ReplicaContext&, const data::Batch& b) { return ref_model(b.x); }, global));
  MirroredStrategy<> mirrored(3);
  auto model = mirrored.scope(make);
  const Tensor got = mirrored.gather(mirrored.run([&](ReplicaContext&, const data::Batch& b) { return model(b.x); }, global));
  CHECK(got.to_vector<float>() == ref.to_vector<float>());
  CHECK(rows_of(ref, 0, 1) != rows_of(ref, 5, 6));  // replica 0's first row and replica 1's differ
  // Micro-batches of a replica's rows, run in order, continue its rows.
  auto micro = one.scope(make);
  std::vector<float> first, second;
  one.run([&](ReplicaContext&, const data::Batch& b) {
    first = micro(data::slice_rows(b.x, 0, 6)).to_vector<float>();
    second = micro(data::slice_rows(b.x, 6, 13)).to_vector<float>();
  }, global);
  CHECK(first == rows_of(ref, 0, 6));
  CHECK(second == rows_of(ref, 6, 13));
  // Inside a step the layer's generator is only read: a checkpoint saves its seed unchanged.
  const auto before = model.replica(0).generators()[0]->state();
  mirrored.run([&](ReplicaContext&, const data::Batch& b) { (void)model(b.x); }, global);
  CHECK(model.replica(0).generators()[0]->state() == before);
  // Outside a step, each call draws a new mask.
  auto outside = make();
  CHECK(outside(ones({4, 16})).to_vector<float>() != outside(ones({4, 16})).to_vector<float>());
}

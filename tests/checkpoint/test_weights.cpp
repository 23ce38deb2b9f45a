// save_weights / load_weights: a model's parameters for inference, written from any strategy
// and loaded into a model of another; every mismatch named, nothing changed on an error.
#include "doctest.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <strata/strata.hpp>

#include "support/damage.hpp"

using namespace strata;

namespace {

std::filesystem::path temp_file(const std::string& tag) {
  return std::filesystem::temp_directory_path() / ("strata_weights_" + tag + "_" + std::to_string(::getpid()));
}

nn::Sequential make_model() { return nn::Sequential(nn::Linear(6, 8), nn::ReLU(), nn::Linear(8, 3)); }

std::vector<std::vector<float>> values(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

/// A few training steps of `model` under `strategy`, so its values are no initial ones.
template <Strategy S, class M>
void train_a_little(S& strategy, M& model) {
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.1); });
  Generator g(5);
  data::TensorDataset ds(uniform({40, 6}, -1, 1, g), from_vector<std::int64_t>({40}, std::vector<std::int64_t>(40, 1)));
  for (auto& batch : strategy.distribute(data::Pipeline(ds).batch(10)))
    strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      opt.apply_gradients(ctx, grad(nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch,
                                                      b.global_size), model.parameters()));
    }, batch);
}

}  // namespace

TEST_CASE("Checkpoint.Weights: saved under MirroredStrategy, loaded into one device and into 3 replicas") {
  const auto path = temp_file("mirrored");
  MirroredStrategy<> mirrored(2);
  manual_seed(1);
  auto model = mirrored.scope(make_model);
  train_a_little(mirrored, model);
  const auto trained = values(model.replica(0));
  save_weights(model, path);

  manual_seed(99);
  nn::Sequential fresh = make_model();
  REQUIRE(values(fresh) != trained);
  load_weights(fresh, path);
  CHECK(values(fresh) == trained);

  MirroredStrategy<> three(3);
  auto copies = three.scope(make_model);
  load_weights(copies, path);
  for (std::size_t r = 0; r < 3; ++r) CHECK(values(copies.replica(r)) == trained);
  std::filesystem::remove(path);
}

TEST_CASE("Checkpoint.Weights: a mismatch is named and changes nothing") {
  const auto path = temp_file("mismatch");
  manual_seed(2);
  nn::Sequential saved = make_model();
  save_weights(saved, path);
  manual_seed(3);
  nn::Sequential wider(nn::Linear(6, 9), nn::ReLU(), nn::Linear(9, 3));
  const auto before = values(wider);
  CHECK_THROWS_WITH_AS(load_weights(wider, path),
                       doctest::Contains("'0.weight' is [8, 6] float32 in the file, [9, 6] float32 in the model"),
                       invalid_argument);
  CHECK(values(wider) == before);
  nn::Sequential deeper(nn::Linear(6, 8), nn::ReLU(), nn::Linear(8, 3), nn::ReLU(), nn::Linear(3, 3));
  CHECK_THROWS_WITH_AS(load_weights(deeper, path), doctest::Contains("no tensor '4.weight'"), invalid_argument);
  nn::Sequential shallower(nn::Linear(6, 8));
  CHECK_THROWS_WITH_AS(load_weights(shallower, path), doctest::Contains("the file's '2.weight' is no parameter"),
                       invalid_argument);
  // A damaged file is an error of the file, not a model with garbage in it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(80);
    f.put('\x7f');
  }
  nn::Sequential same = make_model();
  const auto same_before = values(same);
  CHECK_THROWS(load_weights(same, path));
  CHECK(values(same) == same_before);
  std::filesystem::remove(path);
}

TEST_CASE("Checkpoint.Weights: a damaged last tensor fails before any value changes, in every copy") {
  const auto path = temp_file("damaged_last");
  manual_seed(4);
  nn::Sequential saved = make_model();
  save_weights(saved, path);
  ::support::damage_last_tensor(path);  // every earlier tensor reads and verifies
  manual_seed(5);
  nn::Sequential one = make_model();
  const auto one_before = values(one);
  CHECK_THROWS_WITH_AS(load_weights(one, path), doctest::Contains("fails its checksum"), checksum_error);
  CHECK(values(one) == one_before);
  MirroredStrategy<> three(3);
  manual_seed(6);
  auto copies = three.scope(make_model);
  const auto copies_before = values(copies.replica(0));
  CHECK_THROWS_AS(load_weights(copies, path), checksum_error);
  for (std::size_t r = 0; r < 3; ++r) CHECK(values(copies.replica(r)) == copies_before);
  std::filesystem::remove(path);
}

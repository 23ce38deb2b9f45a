// CentralStorageStrategy: one copy of the variables for every replica thread; N replicas end
// where one device ends, and non-finite gradients are skipped by every replica together.
#include "doctest.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "strategies/equivalence.hpp"


using strata::Tensor;
using equivalence::one_device_reference;

static_assert(strata::Strategy<strata::CentralStorageStrategy<>>);

TEST_CASE("Strategy.CentralStorage.EquivalentToOneDevice") {
  for (int k : {1, 2}) {
    equivalence::Setup s;
    s.accumulation = k;
    const auto ref = one_device_reference(s);
    for (int n : {2, 3, 4}) {
      CAPTURE(k);
      CAPTURE(n);
      strata::CentralStorageStrategy strategy(n);
      CHECK(equivalence::train_difference(strategy, s, ref) < 1e-5);
    }
  }
}

// RELIABILITY D3 under CentralStorageStrategy: a NaN in one replica's gradients at one step is
// skipped by every replica together, and the step counts stay alike.
TEST_CASE("Strategy.CentralStorage.NonFiniteGradientsSkippedTogether") {
  strata::CentralStorageStrategy strategy(3);
  strata::manual_seed(3);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1, {.momentum = 0.9}); });
  for (std::size_t r = 0; r < 3; ++r) opt.replica(r).set_nonfinite(strata::optim::NonFinite::skip);
  equivalence::Setup s;
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26));
  auto values = [&] {
    std::vector<std::vector<float>> out;
    for (const Tensor& p : net.replica(0).parameters()) out.push_back(p.to_vector<float>());
    return out;
  };
  int step = 0;
  std::vector<std::vector<float>> before;
  for (auto& batch : data) {
    if (step == 3) before = values();
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      Tensor loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      if (step == 3 && ctx.replica_id_in_sync_group() == 2) loss = loss * std::nan("");
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    if (step == 3) CHECK(values() == before);  // the poisoned step changed nothing
    if (++step == 6) break;
  }
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(opt.replica(r).skipped_steps() == 1);
    CHECK(opt.replica(r).steps() == 5);
  }
  CHECK(values() != before);  // the other steps trained
}

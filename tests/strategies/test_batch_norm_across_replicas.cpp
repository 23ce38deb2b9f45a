// Batch normalisation under the strategies on threads: SyncBatchNorm normalises by the global
// batch as one device does; per-replica BatchNorm by each replica's rows, its running
// statistics following the global batch, equal on every replica.
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

#include "strategies/thread_equivalence.hpp"

using strata::Tensor;
using equivalence::one_device_reference;

TEST_CASE("Strategy.SyncBatchNormEquivalentToOneDevice") {
  // SyncBatchNorm's statistics span the global batch, so N replicas normalise as one device
  // does over the whole batch: parameters and running statistics equal after 20 steps, on
  // global batches uneven over 2 and 3 replicas (the last batch of 10 rows over 3 replicas).
  for (bool conv : {false, true})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.sync_batch_norm = true;
      s.conv = conv;
      s.global_batch = global;
      s.examples = 20 * global + 10;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3}) {
        CAPTURE(conv);
        CAPTURE(global);
        CAPTURE(n);
        thread_equivalence::check_mirrored_and_central(n, s, ref);
      }
    }
}

TEST_CASE("Strategy.BatchNormPerReplica: each replica's rows normalised alone, running statistics global and equal") {
  // Per-replica BatchNorm (DDP's default): the replicas' outputs differ from one device's over
  // the whole batch, but their running statistics follow the global batch's, so after the first
  // step (same parameters everywhere) they equal one device's, and they stay equal on every
  // replica after that.
  const auto make = [] {
    strata::manual_seed(5);
    return strata::nn::Sequential(strata::nn::Linear(6, 4), strata::nn::BatchNorm1d(4), strata::nn::ReLU(),
                                  strata::nn::Linear(4, 2));
  };
  strata::Generator g(8);
  const Tensor x = strata::uniform({60, 6}, -1, 1, g);
  const Tensor y = strata::from_vector<std::int64_t>({60}, std::vector<std::int64_t>(60, 1));
  const strata::data::TensorDataset data(x, y);
  auto one_model = make();
  (void)one_model(strata::slice(x, 0, 0, 25));  // one device, the first step's forward over its 25 rows
  const auto want_mean = one_model.buffers()[0].to_vector<float>(), want_var = one_model.buffers()[1].to_vector<float>();
  strata::MirroredStrategy strategy(3);
  auto net = strategy.scope(make);
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  int steps = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(data).batch(25))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = strata::nn::cross_entropy(net(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    if (++steps == 1)
      for (std::size_t r = 0; r < 3; ++r) {
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[0].to_vector<float>()}, {want_mean}) < 1e-6);
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[1].to_vector<float>()}, {want_var}) < 1e-6);
      }
  }
  CHECK(steps == 3);  // 25, 25 and 10 rows over 3 replicas
  for (std::size_t r = 1; r < 3; ++r)
    for (std::size_t k = 0; k < net.replica(0).buffers().size(); ++k)
      CHECK(net.replica(r).buffers()[k].to_vector<float>() == net.replica(0).buffers()[k].to_vector<float>());
  CHECK(net.replica(0).buffers()[2].to_vector<float>()[0] == 3.0f);  // num_batches_tracked
}

TEST_CASE("Strategy.BatchNormPerReplica: running statistics settle in order at the step's end, and before an "
          "evaluation-mode norm reads them") {
  // Three training-mode norms then evaluation-mode ones in each step (equivalence::TwoNorms):
  // the evaluation reads every update, applied in order, and every replica ends with one
  // device's running statistics over the global batch (25, 25 and 10 rows).
  for (int n : {2, 3}) {
    strata::MirroredStrategy mirrored(n);
    CHECK(equivalence::per_replica_norms_difference(mirrored) < 1e-5);
    strata::CentralStorageStrategy central(n);
    CHECK(equivalence::per_replica_norms_difference(central) < 1e-5);
  }
}

TEST_CASE("Strategy.BatchNormPerReplica: run(fn) without a batch, and a step that throws") {
  // A step that takes its own rows (run(fn): replica r the rows r * 5 .. r * 5 + 4) combines
  // the norms' statistics as a distributed batch's step does.
  strata::Generator g(4);
  const Tensor x = strata::add(strata::uniform({10, 6}, -1, 1, g), strata::full({10, 6}, 0.5));
  equivalence::TwoNorms ref;
  (void)ref(x);
  const auto same_as_ref = [&](auto& net) {
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t k = 0; k < ref.buffers().size(); ++k)
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[k].template to_vector<float>()},
                                                   {ref.buffers()[k].to_vector<float>()}) < 1e-6);
  };
  const auto own_rows = [&](strata::ReplicaContext& ctx) {
    const std::int64_t r = ctx.replica_id_in_sync_group();
    return strata::slice(x, 0, 5 * r, 5 * r + 5);
  };
  {
    strata::MirroredStrategy strategy(2);
    auto net = strategy.scope([] { return equivalence::TwoNorms(); });
    strategy.run([&](strata::ReplicaContext& ctx) {
      strata::nn::Module& local = net;
      (void)local(own_rows(ctx));
    });
    same_as_ref(net);
  }
  // Replica 1 throws after its norms queued their sums; replica 0, waiting at the step's end
  // to sum them, is released and the replica's own error reaches the caller. Nothing queued
  // stays behind on any thread: a new strategy's step ends where one device's does.
  {
    strata::MirroredStrategy strategy(2);
    auto net = strategy.scope([] { return equivalence::TwoNorms(); });
    CHECK_THROWS_WITH(strategy.run([&](strata::ReplicaContext& ctx) {
      strata::nn::Module& local = net;
      (void)local(own_rows(ctx));
      if (ctx.replica_id_in_sync_group() == 1) throw std::runtime_error("replica 1 broke");
    }), "replica 1 broke");
  }
  strata::MirroredStrategy strategy(2);
  auto net = strategy.scope([] { return equivalence::TwoNorms(); });
  strategy.run([&](strata::ReplicaContext& ctx) {
    strata::nn::Module& local = net;
    (void)local(own_rows(ctx));
  });
  same_as_ref(net);
}

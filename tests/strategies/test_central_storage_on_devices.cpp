// CentralStorageStrategy with its replicas on devices, on the CPU: the stand-in devices cuda:0
// and cuda:1 (support/host_device.hpp). The variables and the optimizer stay on the host; each
// replica computes on its device's copy of them. Two replicas end where one replica on the CPU
// ends (global batches uneven over them, accumulation, clipping), the parameters outside
// run() are the host's, and misuse is named.
#include "doctest.hpp"

#include <memory>
#include <vector>

#include "strategies/on_two_devices.hpp"
#include "support/host_device.hpp"

using namespace strata;

TEST_CASE("Strategy.CentralStorageOnDevices.EquivalentToOneDevice") {
  REQUIRE(support::host_device::installed);
  equivalence::check_uneven_batches_on_two_devices(
      [] { return std::make_unique<CentralStorageStrategy<>>(std::vector{Device::cuda(0), Device::cuda(1)}); });
}

TEST_CASE("Strategy.CentralStorageOnDevices.SyncBatchNorm") {
  // Statistics over the global batch (13 + 12 rows, the last batch 3 + 2) summed on the host:
  // parameters and running statistics end where one replica on the CPU ends, and the running
  // statistics are on the host outside run(), as the variables are.
  REQUIRE(support::host_device::installed);
  {  // (the MLP: the stand-in devices have no convolutions, which need cuDNN)
    equivalence::Setup s;
    s.sync_batch_norm = true;
    s.global_batch = 25;
    s.examples = 20 * 25 + 5;
    strata::OneDeviceStrategy one;
    const auto want = equivalence::train_steps(one, s);
    CentralStorageStrategy<> strategy(std::vector{Device::cuda(0), Device::cuda(1)});
    s.after_training = [&](nn::Module& m) {
      REQUIRE_FALSE(m.buffers().empty());
      for (const Tensor& b : m.buffers()) CHECK(b.device() == Device::cpu());
    };
    const auto got = equivalence::train_steps(strategy, s);
    CHECK(equivalence::max_relative_difference(got, want) < 1e-5);
  }
}

TEST_CASE("Strategy.CentralStorageOnDevices.BatchNormPerReplica") {
  // Per-replica norms on the devices: their running statistics wait for the step's end (after
  // the update has moved them to the host) and end as one device's over the global batch.
  REQUIRE(support::host_device::installed);
  CentralStorageStrategy<> strategy(std::vector{Device::cuda(0), Device::cuda(1)});
  CHECK(equivalence::per_replica_norms_difference(strategy) < 1e-5);
}

TEST_CASE("Strategy.CentralStorageOnDevices.HostVariablesAndDeviceReplicas") {
  REQUIRE(support::host_device::installed);
  CentralStorageStrategy<> strategy(std::vector{Device::cuda(0), Device::cuda(1)});
  manual_seed(3);
  auto model = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.01); });
  equivalence::Setup s;
  for (auto& batch : strategy.distribute(data::Pipeline(equivalence::dataset(s)).batch(9).take(3)))
    strategy.run(
        [&](ReplicaContext& ctx, const data::Batch& b) {
          const int r = ctx.replica_id_in_sync_group();
          CHECK(b.x.device() == Device::cuda(r));
          for (const Tensor& p : model.parameters()) CHECK(p.device() == Device::cuda(r));
          Tensor t = full({2}, r + 1.0).to(Device::cuda(r));  // a user's sum of device values
          ctx.all_reduce(ReduceOp::Sum, t);
          CHECK(t.device() == Device::cuda(r));
          CHECK(t.to(Device::cpu()).to_vector<float>() == std::vector<float>{3, 3});
          Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
          opt.apply_gradients(ctx, grad(loss, model.parameters()));
        },
        batch);
  // Outside run(): the host's variables, one set for both replicas, and the optimizer's state there.
  for (int r = 0; r < 2; ++r)
    for (const Tensor& p : model.replica(r).parameters()) CHECK(p.device() == Device::cpu());
  CHECK(model.replica(0).parameters()[0].to_vector<float>() == model.replica(1).parameters()[0].to_vector<float>());
  for (const auto& [name, t] : opt.replica(0).state()) CHECK(t.device() == Device::cpu());
  CHECK_THROWS_WITH_AS(CentralStorageStrategy<>(std::vector{Device::cuda(0), Device::cuda(0)}),
                       doctest::Contains("named twice"), std::exception);
  CHECK_THROWS_WITH_AS(CentralStorageStrategy<>(std::vector{Device::cpu(), Device::cuda(1)}),
                       doctest::Contains("all on the CPU or all on GPUs"), std::exception);
  CHECK_THROWS_WITH_AS(CentralStorageStrategy<>(std::vector{Device::cuda(2)}), doctest::Contains("does not exist"),
                       std::exception);
}

// MirroredStrategy over device replicas, on the CPU: C = support::HostDeviceCollective puts
// replica r on the stand-in device cuda:r (support/host_device.hpp, host memory that host
// code must not read), as MirroredStrategy<Nccl> puts it on GPU r. Two replicas end where one
// replica on the CPU ends (global batches uneven over them), with their copies, rows and
// gradient buckets on their devices; the replicas' values come back to the host; misuse is
// named. The same strategy over real GPUs and NCCL is in tests/cuda/test_nccl*.cu.
#include "doctest.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "strategies/on_two_devices.hpp"
#include "support/host_device.hpp"
#include "support/host_device_collective.hpp"

using namespace strata;
using support::HostDeviceCollective;
using OnDevices = MirroredStrategy<HostDeviceCollective>;

static_assert(Strategy<OnDevices>);
static_assert(collective::DeviceCollective<HostDeviceCollective>);

TEST_CASE("Strategy.MirroredOnDevices.EquivalentToOneDevice") {
  REQUIRE(support::host_device::installed);
  REQUIRE(cuda_device_count() == 2);
  equivalence::check_uneven_batches_on_two_devices(
      [] { return std::make_unique<OnDevices>(2, MirroredOptions{.bucket_bytes = 2048}); });  // several buckets
}

TEST_CASE("Strategy.MirroredOnDevices.BatchNormPerReplica") {
  // Per-replica norms on the devices: their running statistics, summed once at the step's end,
  // end as one device's over the global batch on both replicas.
  REQUIRE(support::host_device::installed);
  OnDevices strategy(2);
  CHECK(equivalence::per_replica_norms_difference(strategy) < 1e-5);
}

TEST_CASE("Strategy.MirroredOnDevices.CopiesAndRowsLiveOnTheirDevices") {
  REQUIRE(support::host_device::installed);
  OnDevices strategy;  // every device the program sees: 2
  REQUIRE(strategy.num_replicas_in_sync() == 2);
  manual_seed(3);
  auto model = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.01); });
  equivalence::Setup s;
  auto batches = strategy.distribute(data::Pipeline(equivalence::dataset(s)).batch(9).take(3));
  for (auto& batch : batches) {
    auto where = strategy.run(
        [&](ReplicaContext& ctx, const data::Batch& b) {
          const int r = ctx.replica_id_in_sync_group();
          CHECK(b.x.device() == Device::cuda(r));
          CHECK(b.y.device() == Device::cuda(r));
          for (const Tensor& p : model.parameters()) CHECK(p.device() == Device::cuda(r));
          Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
          opt.apply_gradients(ctx, grad(loss, model.parameters()));
          return full({1}, static_cast<double>(b.size)).to(Device::cuda(r));
        },
        batch);
    // Device values come back to the host: the rows 5 + 4 of each batch of 9.
    const Tensor total = strategy.reduce(ReduceOp::Sum, where);
    CHECK(total.device() == Device::cpu());
    CHECK(total.item() == 9.0);
    CHECK(strategy.gather(where).to_vector<float>() == std::vector<float>{5.0f, 4.0f});
  }
  // The copies stay the same bits on both devices (every replica applies the same sums).
  std::vector<std::vector<float>> copies[2];
  for (int r = 0; r < 2; ++r)
    for (const Tensor& p : model.replica(r).parameters()) copies[r].push_back(p.to_vector<float>());
  CHECK(copies[0] == copies[1]);
}

TEST_CASE("Strategy.MirroredOnDevices.MisuseIsNamed") {
  REQUIRE(support::host_device::installed);
  CHECK_THROWS_WITH_AS(OnDevices(std::vector{Device::cuda(0), Device::cuda(0)}), doctest::Contains("named twice"),
                       std::exception);
  CHECK_THROWS_WITH_AS(OnDevices(std::vector{Device::cpu(), Device::cuda(1)}), doctest::Contains("on GPUs"),
                       std::exception);
  CHECK_THROWS_WITH_AS(OnDevices(3), doctest::Contains("cuda:2 does not exist"), std::exception);
  CHECK_THROWS_WITH_AS(MirroredStrategy<>(std::vector{Device::cuda(0)}), doctest::Contains("MirroredStrategy<collective::Nccl>"),
                       std::exception);
  CHECK_THROWS_WITH_AS(OnDevices(2, MirroredOptions{.split_update = UpdateSplit::on, .gradients = GradientLayout::sharded}),
                       doctest::Contains("GPU replicas hold their gradients whole"), std::exception);
  // A replica that fails mid-step: the other, waiting for its gradients, is released and the
  // first failure is what the caller sees.
  OnDevices strategy(2);
  manual_seed(3);
  auto model = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.1); });
  equivalence::Setup s;
  for (auto& batch : strategy.distribute(data::Pipeline(equivalence::dataset(s)).batch(8).take(1)))
    CHECK_THROWS_WITH_AS(strategy.run(
                             [&](ReplicaContext& ctx, const data::Batch& b) {
                               if (ctx.replica_id_in_sync_group() == 1) throw std::runtime_error("replica 1's own error");
                               Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
                               opt.apply_gradients(ctx, grad(loss, model.parameters()));
                             },
                             batch),
                         doctest::Contains("replica 1's own error"), std::runtime_error);
}

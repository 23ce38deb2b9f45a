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

namespace {
const bool installed = (support::host_device::install(), true);
}  // namespace

TEST_CASE("Strategy.CentralStorageOnDevices.EquivalentToOneDevice") {
  REQUIRE(installed);
  equivalence::check_uneven_batches_on_two_devices(
      [] { return std::make_unique<CentralStorageStrategy<>>(std::vector{Device::cuda(0), Device::cuda(1)}); });
}

TEST_CASE("Strategy.CentralStorageOnDevices.HostVariablesAndDeviceReplicas") {
  REQUIRE(installed);
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

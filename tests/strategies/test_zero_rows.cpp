// MirroredStrategy (whole and sharded gradients) and CentralStorageStrategy on 2 and 3
// replica threads: an epoch whose last batch leaves replicas without rows ends where one
// device ends, for the CNN, the ResNet (BatchNorm and SyncBatchNorm) and the Transformer.
#include "doctest.hpp"

#include "strategies/zero_rows.hpp"

TEST_CASE("Strategy.ZeroRowReplicas.ThreadsEndTheEpochWhereOneDeviceEnds") {
  using zero_rows::Model;
  for (const Model m : zero_rows::kModels)
    for (int n : {2, 3}) {
      CAPTURE(zero_rows::name(m));
      CAPTURE(n);
      const auto ref = zero_rows::one_device_reference(m, n);
      strata::MirroredStrategy whole(n);
      CHECK(zero_rows::difference(m, zero_rows::train_epoch(whole, m), ref) < 1e-5);
      strata::MirroredStrategy sharded(n, {.split_update = strata::UpdateSplit::on,
                                           .gradients = strata::GradientLayout::sharded});
      CHECK(zero_rows::difference(m, zero_rows::train_epoch(sharded, m), ref) < 1e-5);
      strata::CentralStorageStrategy central(n);
      CHECK(zero_rows::difference(m, zero_rows::train_epoch(central, m), ref) < 1e-5);
    }
}

// MirroredStrategy (whole and sharded gradients) and CentralStorageStrategy on 2 and 3
// replica threads: an epoch whose last batch leaves replicas without rows ends where one
// device ends, for the CNN, the ResNet (BatchNorm and SyncBatchNorm) and the Transformer.
#include "doctest.hpp"

#include "strategies/zero_rows_threads.hpp"

TEST_CASE("Strategy.ZeroRowReplicas.ThreadsEndTheEpochWhereOneDeviceEnds") {
  using zero_rows::Model;
  for (const Model m : zero_rows::kModels)
    for (int n : {2, 3}) {
      CAPTURE(zero_rows::name(m));
      CAPTURE(n);
      const auto ref = zero_rows::one_device_reference(m, n);
      for (const double d : zero_rows::thread_strategy_differences(m, n, ref)) CHECK(d < 1e-5);
    }
}

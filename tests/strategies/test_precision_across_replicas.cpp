// MirroredStrategy (whole and sharded gradients) and CentralStorageStrategy on 2 and 3 replica
// threads under the bfloat16 policy, set once on the calling thread: an epoch of global
// batches of 5, 5 and 1 rows (strategies/zero_rows.hpp) ends where one device under bfloat16
// ends it. The rounding to bfloat16 is element by element, so a row's products round the same
// operands wherever it runs, and N replicas differ from one device only by the float32 sums'
// order, as in float32 (the same 1e-5 bound), while bfloat16 itself moves the result by far
// more than that.
#include "doctest.hpp"

#include "strategies/zero_rows_threads.hpp"

TEST_CASE("Strategy.Precision.Bf16ThreadsEndTheEpochWhereOneDeviceEnds") {
  using zero_rows::Model;
  for (const Model m : {Model::cnn, Model::transformer})
    for (int n : {2, 3}) {
      CAPTURE(zero_rows::name(m));
      CAPTURE(n);
      const auto f32 = zero_rows::one_device_reference(m, n);
      const strata::precision::Scope bf16(strata::precision::bfloat16);
      const auto ref = zero_rows::one_device_reference(m, n);
      CHECK(zero_rows::difference(m, ref, f32) > 1e-4);  // the policy changes the products
      for (const double d : zero_rows::thread_strategy_differences(m, n, ref)) CHECK(d < 1e-5);
    }
}

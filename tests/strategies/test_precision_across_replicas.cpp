// MirroredStrategy (whole and sharded gradients) and CentralStorageStrategy on 2 and 3 replica
// threads under a 16-bit policy, set once on the calling thread: an epoch of global batches of
// 5, 5 and 1 rows (strategies/zero_rows.hpp) ends where one device under that policy ends it,
// within zero_rows::bound: the rounding is element by element, so a row's products round the
// same operands wherever it runs, and N replicas differ from one device by the float32 sums'
// order and the operands that order moves across a rounding boundary of the 16-bit type. The
// policy itself moves the result by more than that bound.
#include "doctest.hpp"

#include <string>
#include <vector>

#include "strategies/zero_rows_threads.hpp"

namespace {

// For the CNN and the Transformer on 2 and 3 threads: one device's epoch under `policy`
// (`policy_ref`, with the loss scale's row where it has one) moves from float32's by more
// than the bound, and every thread strategy ends within it; then `more(m, n)`.
template <class More>
void each_model_under(strata::precision::Policy policy, More more) {
  using zero_rows::Model;
  const double bound = zero_rows::bound(policy);
  for (const Model m : {Model::cnn, Model::transformer})
    for (int n : {2, 3}) {
      const std::string model = zero_rows::name(m);
      CAPTURE(model);
      CAPTURE(n);
      const auto f32 = zero_rows::one_device_reference(m, n);
      const strata::precision::Scope scope(policy);
      auto ref = zero_rows::one_device_reference(m, n);
      auto params = ref;
      if (strata::precision::needs_loss_scale(policy)) params.pop_back();  // the loss scale's row
      CHECK(zero_rows::difference(m, params, f32) > bound);  // the policy changes the products
      for (const double d : zero_rows::thread_strategy_differences(m, n, ref)) CHECK(d < bound);
      more(m, n);
    }
}

}  // namespace

TEST_CASE("Strategy.Precision.Bf16ThreadsEndTheEpochWhereOneDeviceEnds") {
  each_model_under(strata::precision::bfloat16, [](zero_rows::Model, int) {});
}

TEST_CASE("Strategy.Precision.Fp16ThreadsWithTheLossScaleEndWhereOneDeviceEnds") {
  // float16 products with the dynamic loss scale; then a loss made infinite on the last
  // replica alone in the epoch's second step: every replica skips that step and halves the
  // scale, as one device does when its whole batch overflows (the scale, the skipped steps and
  // the step count are compared with the parameters).
  each_model_under(strata::precision::float16, [](zero_rows::Model m, int n) {
    CHECK(zero_rows::one_device_reference(m, n).back() == std::vector<float>{65536.0f, 0.0f, 3.0f});
    const zero_rows::Poison poison{.replica = n - 1, .step = 1};
    const auto poisoned_ref = zero_rows::one_device_reference(m, n, poison);
    CHECK(poisoned_ref.back() == std::vector<float>{32768.0f, 1.0f, 2.0f});
    for (const double d : zero_rows::thread_strategy_differences(m, n, poisoned_ref, poison))
      CHECK(d < zero_rows::bound(strata::precision::float16));
  });
}

// Learning-rate schedules and clipping by the global norm under the strategies on threads:
// N replicas end where one device ends, and each setting changes what one device ends with.
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

TEST_CASE("Strategy.ScheduleEquivalentToOneDevice") {
  equivalence::Setup s;
  s.schedule = true;
  s.global_batch = 25;
  const auto ref = one_device_reference(s);
  CHECK(equivalence::max_relative_difference(one_device_reference(thread_equivalence::setup(25)), ref) > 1e-3);
  for (int n : {2, 3}) {
    CAPTURE(n);
    thread_equivalence::check_mirrored_and_central(n, s, ref);
  }
}

TEST_CASE("Strategy.GlobalNormClippingEquivalentToOneDevice") {
  equivalence::Setup s;
  s.clip_norm = 0.5;
  s.global_batch = 25;
  const auto ref = one_device_reference(s);
  CHECK(equivalence::max_relative_difference(one_device_reference(thread_equivalence::setup(25)), ref) > 1e-3);
  // The clip multi_worker_equivalence and parameter_server_equivalence run changes the result too.
  equivalence::Setup smoothed = thread_equivalence::setup(25, equivalence::Loss::smoothed_cross_entropy);
  const auto unclipped = one_device_reference(smoothed);
  smoothed.clip_norm = 0.1;
  CHECK(equivalence::max_relative_difference(one_device_reference(smoothed), unclipped) > 1e-3);
  for (int n : {2, 3}) {
    CAPTURE(n);
    strata::MirroredStrategy mirrored(n);
    CHECK(equivalence::train_difference(mirrored, s, ref) < 1e-5);
    // Sharded gradients with the update split (each replica updates its share), small buckets.
    strata::MirroredStrategy sharded(n, {.bucket_bytes = 2048, .split_update = strata::UpdateSplit::on,
                                         .gradients = strata::GradientLayout::sharded});
    CHECK(equivalence::train_difference(sharded, s, ref) < 1e-5);
    strata::MirroredStrategy split(n, {.bucket_bytes = 2048, .split_update = strata::UpdateSplit::on});
    CHECK(equivalence::train_difference(split, s, ref) < 1e-5);
    strata::CentralStorageStrategy central(n);
    CHECK(equivalence::train_difference(central, s, ref) < 1e-5);
  }
}

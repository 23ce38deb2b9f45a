// What the equivalence tests of the strategies on threads share: Mirrored and CentralStorage
// held to one device's parameters on one setup, and the plain setup on another global batch.
#pragma once

#include <cstdint>
#include <vector>

#include "doctest.hpp"
#include "strategies/equivalence.hpp"

namespace thread_equivalence {

/// Mirrored and CentralStorage over n replicas both train s to within 1e-5 of one device (ref).
inline void check_mirrored_and_central(int n, const equivalence::Setup& s, const std::vector<std::vector<float>>& ref) {
  strata::MirroredStrategy mirrored(n);
  CHECK(equivalence::train_difference(mirrored, s, ref) < 1e-5);
  strata::CentralStorageStrategy central(n);
  CHECK(equivalence::train_difference(central, s, ref) < 1e-5);
}

/// The plain setup on a global batch of `global`, with `loss`.
inline equivalence::Setup setup(std::int64_t global, equivalence::Loss loss = equivalence::Loss::cross_entropy) {
  equivalence::Setup s;
  s.global_batch = global;
  s.loss = loss;
  return s;
}

}  // namespace thread_equivalence

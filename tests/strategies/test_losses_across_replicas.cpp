// The users' losses under the strategies on threads: MSE and a label-smoothed cross-entropy
// (compute_average_loss) end where one device ends on global batches uneven over the replicas.
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

TEST_CASE("Strategy.EveryLossEquivalentToOneDevice") {
  // MSE regression and a label-smoothed cross-entropy through compute_average_loss, on a
  // global batch of 25 (uneven over 2 and 3 replicas) and 26 (uneven over 3).
  for (auto loss : {equivalence::Loss::mse, equivalence::Loss::smoothed_cross_entropy})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.loss = loss;
      s.global_batch = global;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3}) {
        CAPTURE(static_cast<int>(loss));
        CAPTURE(global);
        CAPTURE(n);
        thread_equivalence::check_mirrored_and_central(n, s, ref);
      }
    }
}

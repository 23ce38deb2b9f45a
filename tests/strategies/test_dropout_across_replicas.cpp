// Dropout under the strategies on threads: every example draws the mask it draws on one device,
// whichever replica runs it, so N replicas end where one device ends.
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

TEST_CASE("Strategy.DropoutEquivalentToOneDevice") {
  // A model with Dropout: every example draws the mask it draws on one device, whichever
  // replica runs it, on global batches uneven over 2 and 3 replicas, and with a replica's rows
  // in two micro-batches (k = 2) against one device's whole batch.
  for (bool conv : {false, true})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.dropout = true;
      s.conv = conv;
      s.global_batch = global;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3})
        for (int k : {1, 2}) {
          CAPTURE(conv);
          CAPTURE(global);
          CAPTURE(n);
          CAPTURE(k);
          equivalence::Setup sk = s;
          sk.accumulation = k;
          thread_equivalence::check_mirrored_and_central(n, sk, ref);
        }
    }
}

// The equivalence property for strategies with their replicas on the two stand-in devices
// (support/host_device.hpp): trained on global batches of 25 (13 + 12 rows, the last batch
// 3 + 2), with gradient accumulation 1 and 2, with and without global-norm clipping, the
// strategy that `make()` returns ends where OneDeviceStrategy on the CPU ends.
#pragma once

#include <vector>

#include "doctest.hpp"
#include "strategies/equivalence.hpp"

namespace equivalence {

template <class Make>
void check_uneven_batches_on_two_devices(Make&& make) {
  for (int k : {1, 2})
    for (bool clip : {false, true}) {
      Setup s;
      s.global_batch = 25;
      s.examples = 20 * 25 + 5;
      s.accumulation = k;
      s.clip_norm = clip ? 0.5 : 0.0;
      std::vector<double> want_losses, got_losses;
      const auto want = one_device_reference(s, &want_losses);
      CAPTURE(k);
      CAPTURE(clip);
      auto strategy = make();
      const auto got = train_steps(*strategy, s, &got_losses);
      CHECK(max_relative_difference(got, want) < 1e-5);
      REQUIRE(got_losses.size() == want_losses.size());
      for (std::size_t i = 0; i < got_losses.size(); ++i)
        CHECK(got_losses[i] == doctest::Approx(want_losses[i]).epsilon(1e-5));
    }
}

}  // namespace equivalence

// The conformance suite (conformance.hpp) on collective::InProcess: ranks are threads.
#include "collective/conformance.hpp"

#include <chrono>

#include <strata/collective/in_process.hpp>

using strata::collective::InProcess;

// The capabilities InProcess opts into, and those it lacks (collective/capabilities.hpp).
static_assert(strata::Collective<InProcess> && strata::collective::RawCollective<InProcess> &&
              strata::collective::ThreadGroupCollective<InProcess>);
static_assert(!strata::collective::WireCompression<InProcess> && !strata::collective::HostSharedMemory<InProcess> &&
              !strata::collective::DeviceCollective<InProcess>);

template <>
struct World<InProcess> {
  template <class F>
  static void run(int n, F&& fn) {
    InProcess::launch(n, fn);
  }
};

TEST_CASE_TEMPLATE_INVOKE(allreduce_suite, InProcess);
TEST_CASE_TEMPLATE_INVOKE(data_movement_suite, InProcess);
TEST_CASE_TEMPLATE_INVOKE(async_suite, InProcess);
TEST_CASE_TEMPLATE_INVOKE(async_gather_suite, InProcess);

TEST_CASE("Collective.Half.RoundTripsEveryValue") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    strata::Half h;
    h.bits = static_cast<std::uint16_t>(b);
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    CHECK(strata::Half(f).bits == h.bits);
    strata::BFloat16 g;
    g.bits = static_cast<std::uint16_t>(b);
    const float gf = static_cast<float>(g);
    if (!std::isnan(gf)) CHECK(strata::BFloat16(gf).bits == g.bits);
  }
  CHECK(static_cast<float>(strata::Half(1.0f / 3.0f)) == doctest::Approx(0.33325195f));
  CHECK(static_cast<float>(strata::Half(70000.0f)) == INFINITY);
  CHECK(static_cast<float>(strata::BFloat16(1.0f + 1.0f / 256.0f)) == 1.0f);  // ties to even
}

TEST_CASE("Collective.InProcess.MismatchMatrix" * doctest::timeout(60)) {
  strata::collective::Options o;
  o.timeout = std::chrono::milliseconds(10'000);
  o.check_fingerprints = true;
  for (int n : {2, 3})
    for (int k = 0; k < conformance::kMismatchCases; ++k)
      strata::collective::InProcess::launch(n, [k](strata::collective::InProcess& c) { conformance::mismatch_case(c, k); },
                                            o);
}

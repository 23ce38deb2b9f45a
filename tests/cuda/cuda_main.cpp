// main() of the CUDA test programs: without enough devices (STRATA_TEST_MIN_DEVICES, default
// 1) they exit 77, which Meson reports as SKIP (never as a pass), saying why; with them they
// run every doctest case.
#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest.hpp"

#include <cstdio>

#include <strata/kernels/cuda/runtime.hpp>

#ifndef STRATA_TEST_MIN_DEVICES
#define STRATA_TEST_MIN_DEVICES 1
#endif

int main(int argc, char** argv) {
  const int n = strata::kernels::cuda::device_count();
  if (n == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", strata::kernels::cuda::no_device_reason().c_str());
    return 77;
  }
  if (n < STRATA_TEST_MIN_DEVICES) {
    std::printf("SKIP: these tests need %d CUDA devices, this machine has %d\n", STRATA_TEST_MIN_DEVICES, n);
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

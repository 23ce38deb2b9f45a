// main() of the CUDA test programs: without a usable device they exit 77, which Meson
// reports as SKIP (never as a pass), saying why; with one they run every doctest case.
#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest.hpp"

#include <cstdio>

#include <strata/kernels/cuda/runtime.hpp>

int main(int argc, char** argv) {
  if (strata::kernels::cuda::device_count() == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", strata::kernels::cuda::no_device_reason().c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

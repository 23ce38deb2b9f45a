// The OpenBLAS kernel selection (kernels/strata/kernels/cpu/blas_core.hpp): a CPU that OpenBLAS
// sent to its pre-AVX fallback runs the kernels of its own vector width, nothing else changes,
// and the user's choice (OPENBLAS_CORETYPE, STRATA_BLAS_CORE=keep) stands. tests/meson.build
// runs this file as it is, with STRATA_BLAS_CORE=keep and with a value it does not know; the
// GEMM results of the selected kernels are checked against float64 in test_gemm.cpp.
#include "doctest.hpp"

#include <cstdlib>
#include <string>

#include <strata/kernels/cpu/gemm.hpp>

using strata::kernels::cpu::blas_core;
using strata::kernels::cpu::BlasCore;
namespace kd = strata::kernels::cpu::detail;

TEST_CASE("Kernels.BlasCore.PreAvxCoresAreTheFallbackAndOlderCpus") {
  for (const char* name : {"Prescott", "prescott", "Core2", "Nehalem", "Atom", "Opteron_SSE3", "Katmai"})
    CHECK_MESSAGE(kd::is_pre_avx_core(name), name);
  for (const char* name : {"SkylakeX", "Cooperlake", "Haswell", "Zen", "Sandybridge", "SapphireRapids", "", "Unknown"})
    CHECK_MESSAGE(!kd::is_pre_avx_core(name), name);
}

TEST_CASE("Kernels.BlasCore.RunsTheKernelsOfTheCpu") {
  const BlasCore& core = blas_core();
  CHECK(&core == &blas_core());  // chosen once per process
  const char* mode_env = std::getenv("STRATA_BLAS_CORE");
  const std::string mode = mode_env ? mode_env : "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const bool user_choice = (!mode.empty() && mode != "auto") || (forced && *forced);
#if STRATA_HAS_BLAS
  INFO("chosen=", core.chosen, " used=", core.used, " reason=", core.reason);
  REQUIRE(!core.chosen.empty());
  REQUIRE(!core.reason.empty());
  if (user_choice) {
    CHECK(core.used == core.chosen);
    CHECK(core.reason.rfind("kept: ", 0) == 0);
  } else if (*kd::core_for_cpu_features() != '\0' && gotoblas_dynamic_init) {
    // A CPU with AVX2 or AVX-512 under an OpenBLAS that can select again never runs the
    // pre-AVX kernels, whatever OpenBLAS chose at load.
    CHECK(!kd::is_pre_avx_core(core.used));
    CHECK(core.reselected() == kd::is_pre_avx_core(core.chosen));
  } else {
    CHECK(core.used == core.chosen);
  }
  if (mode == "keep") CHECK(core.reason == "kept: STRATA_BLAS_CORE=keep");
  if (!mode.empty() && mode != "auto" && mode != "keep")  // a value it does not know is named
    CHECK(core.reason == "kept: STRATA_BLAS_CORE='" + mode + "' is none of auto, keep");
  // The environment stays the user's: the variable set for OpenBLAS is removed again.
  const char* now = std::getenv("OPENBLAS_CORETYPE");
  CHECK((now == nullptr) == (forced == nullptr));
#else
  (void)user_choice;
  CHECK(core.chosen.empty());
  CHECK(core.used.empty());
  CHECK(!core.reselected());
#endif
}

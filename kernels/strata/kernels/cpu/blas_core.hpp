/// \file
/// Which OpenBLAS kernels run strata's GEMMs, and the fix for a CPU newer than its OpenBLAS.
/// An OpenBLAS built for many CPUs (DYNAMIC_ARCH, as Debian's) picks its kernels by the CPU's
/// model number when it loads; a model its release does not know gets the SSE3 "Prescott"
/// kernels, far slower than the AVX2 or AVX-512 ones that CPU can run (OpenBLAS 0.3.21 on an
/// Emerald Rapids Xeon: 33 against 148 GFLOP/s for a 512^3 SGEMM). blas_core() finds that
/// case by the CPU's own feature flags and has OpenBLAS select again for them, the way its
/// documented OPENBLAS_CORETYPE does at load: SkylakeX for AVX-512, Haswell for AVX2 + FMA.
/// It runs once per process, at static initialisation (in a program, before main and its
/// threads; in a library loaded later, when it loads). It changes nothing when the user set
/// OPENBLAS_CORETYPE or STRATA_BLAS_CORE=keep (the default: auto), or when OpenBLAS's choice
/// uses AVX or is a name not listed here (docs/performance.md, "OpenBLAS kernels").
#pragma once

#include <cctype>   // std::tolower
#include <cstdio>   // std::fprintf
#include <cstdlib>  // std::getenv (OPENBLAS_CORETYPE), setenv, unsetenv
#include <string>
#include <string_view>

#include <strata/config.hpp>  // STRATA_HAS_BLAS
#include <strata/support/environment.hpp>

#if STRATA_HAS_BLAS
#include <cblas.h>  // openblas_get_corename

// OpenBLAS's own (re)selection entry points, exported by DYNAMIC_ARCH builds only: weak, so a
// build for one CPU links without them and the address reads null.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));
#endif

namespace strata::kernels::cpu {

/// What blas_core() found and did. Every field is empty in a build without OpenBLAS.
struct BlasCore {
  std::string chosen;  ///< the kernels OpenBLAS chose when it loaded, e.g. "Prescott"
  std::string used;    ///< the kernels in use now: `chosen`, or what strata selected instead
  std::string reason;  ///< why `used` differs from `chosen`, or why it does not
  bool reselected() const noexcept { return used != chosen; }
};

namespace detail {

inline std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// True for OpenBLAS's x86 kernels that use no AVX: the Prescott fallback and older CPUs'.
inline bool is_pre_avx_core(std::string_view name) {
  const std::string n = lowercase(name);
  for (const char* c : {"katmai", "coppermine", "northwood", "prescott", "banias", "core2", "penryn", "dunnington",
                        "nehalem", "atom", "nano", "athlon", "opteron", "opteron_sse3", "barcelona", "bobcat"})
    if (n == c) return true;
  return false;
}

/// OpenBLAS's kernels for this CPU's widest vector unit the OS enables: "SkylakeX" for
/// AVX-512 (F, BW, VL, DQ, CD), "Haswell" for AVX2 + FMA; empty for anything narrower or
/// not x86-64.
inline const char* core_for_cpu_features() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

inline BlasCore select_blas_core() {
  BlasCore r;
#if STRATA_HAS_BLAS
  r.chosen = r.used = openblas_get_corename();
  const char* mode_env = environment::get("STRATA_BLAS_CORE");
  const std::string_view mode = mode_env ? mode_env : "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string target = core_for_cpu_features();
  if (!mode.empty() && mode != "auto" && mode != "keep") {
    // Before main there is no caller to throw to: the error is said once, and OpenBLAS's
    // choice, the safe one, stands.
    r.reason = "kept: STRATA_BLAS_CORE='" + std::string(mode) + "' is none of auto, keep";
    std::fprintf(stderr, "[strata.kernels] %s\n", r.reason.c_str());
  } else if (mode == "keep") {
    r.reason = "kept: STRATA_BLAS_CORE=keep";
  } else if (forced && *forced) {
    r.reason = "kept: OPENBLAS_CORETYPE is set";
  } else if (!is_pre_avx_core(r.chosen) || target.empty()) {
    r.reason = "kept: OpenBLAS's choice fits this CPU";
  } else if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) {
    r.reason = "kept: this OpenBLAS is built for one CPU (no DYNAMIC_ARCH), it cannot select again";
  } else {
    // What OpenBLAS does at load with OPENBLAS_CORETYPE set; the variable is removed again so
    // that the environment stays the user's.
    ::setenv("OPENBLAS_CORETYPE", target.c_str(), 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    ::unsetenv("OPENBLAS_CORETYPE");
    r.used = openblas_get_corename();
    r.reason = lowercase(r.used) == lowercase(target)
                   ? "OpenBLAS chose " + r.chosen + " kernels, which use no AVX, on a CPU with " +
                         (target == "SkylakeX" ? "AVX-512" : "AVX2") + "; selected its " + r.used + " kernels"
                   : "OpenBLAS has no " + target + " kernels; it selected " + r.used;
  }
#endif
  return r;
}

}  // namespace detail

/// The OpenBLAS kernels strata's GEMMs run, chosen once per process (see the file comment).
inline const BlasCore& blas_core() {
  static const BlasCore core = detail::select_blas_core();
  return core;
}

namespace detail {
// The selection runs at static initialisation, before a program starts its threads: setenv
// is not safe beside another thread's getenv, and no GEMM may be in flight while OpenBLAS
// swaps its kernels. (A plug-in loaded into a running process should set STRATA_BLAS_CORE=keep
// or OPENBLAS_CORETYPE if its host calls OpenBLAS from other threads.)
inline const bool blas_core_selected_at_start = (blas_core(), true);
}  // namespace detail

}  // namespace strata::kernels::cpu

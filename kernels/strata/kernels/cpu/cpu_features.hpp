/// \file
/// What the CPU runs, asked once: the kernels with AVX-512 loops (the GEMM, im2col, the exp and
/// GELU passes) check here before taking them.
#pragma once

namespace strata::kernels::cpu {

/// Whether this CPU runs AVX-512 F (false off x86-64 and without GCC or clang builtins).
inline bool has_avx512f() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
  return yes;
#else
  return false;
#endif
}

}  // namespace strata::kernels::cpu

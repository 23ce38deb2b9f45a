/// \file
/// What the CPU runs, asked once: the kernels with AVX-512 loops (the GEMM, im2col, the exp and
/// GELU passes), the bfloat16 GEMM's dot-product instructions and the float16 GEMM's
/// conversions check here before taking them.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_CPU_FEATURES_X86 1
#include <cpuid.h>
#endif

namespace strata::kernels::cpu {

/// Whether this CPU runs AVX-512 F (false off x86-64 and without GCC or clang builtins).
inline bool has_avx512f() {
#ifdef STRATA_CPU_FEATURES_X86
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
  return yes;
#else
  return false;
#endif
}

/// Whether this CPU runs AVX512-BF16's dot products and conversions (VDPBF16PS, VCVTNE2PS2BF16)
/// beside AVX-512 BW's word shuffles: CPUID leaf 7, sub-leaf 1, EAX bit 5. Zen 4 and later,
/// Cooper Lake, Sapphire Rapids and later. has_avx512f() has already asked the OS for the
/// 512-bit register state.
inline bool has_avx512_bf16() {
#ifdef STRATA_CPU_FEATURES_X86
  static const bool yes = [] {
    if (!has_avx512f() || !__builtin_cpu_supports("avx512bw")) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;  // (false below leaf 7)
    return (eax >> 5 & 1u) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

/// Whether this CPU converts float <-> float16 in vectors (F16C, CPUID leaf 1 ECX bit 29: every
/// x86-64 since 2013) with the OS saving AVX's registers.
inline bool has_f16c() {
#ifdef STRATA_CPU_FEATURES_X86
  static const bool yes = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx")) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1u) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace strata::kernels::cpu

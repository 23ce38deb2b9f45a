/// \file
/// What the CPU runs, asked once: the kernels with AVX-512 loops (the GEMM, im2col, the exp and
/// GELU passes), the bfloat16 GEMM's dot-product instructions and the float16 GEMM's
/// conversions and the AMX tiles check here before taking them.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_CPU_FEATURES_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>  // SYS_arch_prctl
#include <unistd.h>       // syscall
#endif
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

/// Whether this process may run AMX-BF16's tile products (TDPBF16PS): CPUID leaf 7 EDX bits
/// 22 (AMX-BF16) and 24 (AMX-TILE), the OS saving the tile state (XCR0 bits 17 and 18), and, on
/// Linux, the process's permission for the tile data asked for and granted
/// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux 5.16 and later refuse the tile
/// instructions to a process that has not asked). Sapphire Rapids and later.
inline bool has_amx_bf16() {
#if defined(STRATA_CPU_FEATURES_X86) && defined(__linux__)
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx >> 27 & 1u) == 0) return false;  // OSXSAVE
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || (edx >> 22 & 1u) == 0 || (edx >> 24 & 1u) == 0)
      return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    asm volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo >> 17 & 3u) != 3u) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace strata::kernels::cpu

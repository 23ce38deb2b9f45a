/// \file
/// GEMM with bfloat16 operands and float32 accumulation, the products of a 16-bit step:
/// C = alpha * bf16(op(A)) * bf16(op(B)) + beta * C, then GemmArgs' epilogue, where bf16(X) is
/// X rounded to bfloat16 (to nearest, ties to even) as the kernel reads it. Every product of two
/// bfloat16 values is exact in float; the sums, C, alpha, beta, the epilogue and op(A)'s row
/// sums (taken from the float operand, a layer's bias gradient) stay float32.
///
/// gemm_bf16() runs the kernel bf16_gemm_kernel() chose for this process:
///   - "amx-bf16", on a CPU with AMX-BF16 (Sapphire Rapids and later) whose tiles Linux lets the
///     process use: 16 x 16 float tiles of C, TDPBF16PS 8,192 products an instruction
///     (gemm_amx.hpp). On these CPUs VDPBF16PS issues on one port where float FMAs issue on
///     two, so the AVX512-BF16 kernel is no faster than the float one.
///   - "avx512-bf16", on a CPU with AVX512-BF16 and no usable AMX: a 12 x 32 micro-kernel of
///     VDPBF16PS, each instruction 16 lanes of two products, twice the work of a float FMA in
///     the same issue slot on Zen 4 (gemm_avx512_bf16.hpp). Both operands are packed as
///     bfloat16 pairs along the depth (float A is read in place by the float kernel; here its
///     conversion is a pass that 32 columns or more amortise).
///   - "float32", elsewhere: the operands rounded into float copies (kernels/math/bfloat16.hpp),
///     then the float GEMM (gemm.hpp) over them: the same products, at float's speed.
/// The vector conversions (VCVTNE2PS2BF16) flush subnormal operands to zero; the scalar one
/// keeps them.
#pragma once

#include <cstdint>
#include <string>

#include <strata/kernels/cpu/cpu_features.hpp>     // has_avx512_bf16, has_amx_bf16
#include <strata/kernels/cpu/gemm_amx.hpp>          // "amx-bf16"
#include <strata/kernels/cpu/gemm_avx512_bf16.hpp>  // "avx512-bf16"
#include <strata/kernels/cpu/gemm_rounded.hpp>      // the fallback
#include <strata/kernels/math/bfloat16.hpp>
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

/// gemm_bf16 on any CPU: op(A) and op(B) rounded to bfloat16 into float copies, then the float
/// GEMM over them (gemm_rounded.hpp).
inline void gemm_bf16_rounded(const math::GemmArgs<float>& g) {
  gemm_rounded_operands(g, [](const float* from, float* to, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) to[i] = math::round_to_bf16(from[i]);
  });
}

/// Whether this build and this process run the AMX kernel (gemm_amx.hpp).
inline bool runs_amx_bf16() {
#ifdef STRATA_GEMM_AMX
  return has_avx512_bf16() && has_amx_bf16();
#else
  return false;
#endif
}

/// Whether this build and this CPU run the AVX512-BF16 kernel (gemm_avx512_bf16.hpp).
inline bool runs_avx512_bf16() {
#ifdef STRATA_GEMM_AVX512
  return has_avx512_bf16();
#else
  return false;
#endif
}

/// The kernel that runs bfloat16 GEMMs in this process, and why (bf16_gemm_kernel()).
struct Bf16GemmKernel {
  std::string name;    ///< "amx-bf16", "avx512-bf16" or "float32"
  std::string reason;  ///< why this one
};

/// The bfloat16 GEMM kernel for this process, chosen once.
inline const Bf16GemmKernel& bf16_gemm_kernel() {
  static const Bf16GemmKernel kernel =
      runs_amx_bf16()      ? Bf16GemmKernel{"amx-bf16", "this CPU has AMX-BF16 and the OS granted its tiles"}
      : runs_avx512_bf16() ? Bf16GemmKernel{"avx512-bf16", "this CPU has AVX512-BF16 and no usable AMX-BF16"}
                           : Bf16GemmKernel{"float32", "this CPU has no AVX512-BF16: the operands are "
                                                       "rounded to bfloat16, the float GEMM multiplies them"};
  return kernel;
}

/// C = alpha * bf16(op(A)) * bf16(op(B)) + beta * C, then g's epilogue (see the file comment),
/// through the fastest kernel this CPU has.
inline void gemm_bf16(const math::GemmArgs<float>& g) {
#ifdef STRATA_GEMM_AMX
  if (runs_amx_bf16()) return gemm_bf16_amx(g);
#endif
#ifdef STRATA_GEMM_AVX512
  if (has_avx512_bf16()) return gemm_bf16_avx512(g);
#endif
  gemm_bf16_rounded(g);
}

}  // namespace strata::kernels::cpu

/// \file
/// GEMM with float16 operands and float32 accumulation, the products of a float16 step:
/// C = alpha * f16(op(A)) * f16(op(B)) + beta * C, then GemmArgs' epilogue, where f16(X) is X
/// rounded to IEEE binary16 (to nearest, ties to even; past 65504 to infinity, so an operand
/// out of float16's range makes the product non-finite, as on a GPU, and a loss scale that is
/// too large shows as non-finite gradients). Every product of two float16 values is exact in
/// float; the sums, C, the epilogue and op(A)'s row sums stay float32.
///
/// No x86 CPU multiplies float16 into float32 sums faster than float: AVX512-FP16 accumulates
/// in float16. The operands are therefore rounded into float copies (F16C's conversions where
/// the CPU has them, 8 at a time, else kernels/math/float16.hpp) and the float GEMM multiplies
/// them (gemm_rounded.hpp): float16's arithmetic at float32's speed. On the host, float16 is
/// the arithmetic of a GPU run, to train or test with; bfloat16 is the fast 16-bit type.
#pragma once

#include <cstdint>

#include <strata/kernels/cpu/cpu_features.hpp>  // has_f16c
#ifdef STRATA_CPU_FEATURES_X86
#define STRATA_GEMM_F16C 1
#include <immintrin.h>
#endif

#include <strata/kernels/cpu/gemm_rounded.hpp>
#include <strata/kernels/math/float16.hpp>
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

/// n floats rounded to float16 and back, one at a time.
inline void round_to_f16(const float* from, float* to, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) to[i] = math::round_to_f16(from[i]);
}

#ifdef STRATA_GEMM_F16C
/// The same with F16C's VCVTPS2PH (to nearest even, subnormals kept, overflow to infinity) and
/// VCVTPH2PS: the scalar conversion's results, bit for bit.
[[gnu::target("avx,f16c")]] inline void round_to_f16_f16c(const float* from, float* to, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT)));
  round_to_f16(from + i, to + i, n - i);
}
#endif

/// C = alpha * f16(op(A)) * f16(op(B)) + beta * C, then g's epilogue (see the file comment).
inline void gemm_f16(const math::GemmArgs<float>& g) {
#ifdef STRATA_GEMM_F16C
  if (has_f16c()) return gemm_rounded_operands(g, round_to_f16_f16c);
#endif
  gemm_rounded_operands(g, round_to_f16);
}

}  // namespace strata::kernels::cpu

/// \file
/// 16 x 16 transposes of 32-bit lanes through AVX-512 registers: a head's keys or values
/// turned into a product's untransposed operand (attention.hpp), and bfloat16 pairs turned
/// from a transposed operand's layout into AMX's rows (gemm_amx.hpp). Lanes move as bits, so
/// any 32-bit type goes through the float form.
#pragma once

#include <cstdint>

#include <strata/kernels/cpu/fast_math.hpp>  // STRATA_AVX512_PACKS, f32x16

namespace strata::kernels::cpu {

#ifdef STRATA_AVX512_PACKS
#define STRATA_TRANSPOSE_AVX512 1
namespace avx512 {

namespace detail {
using cpu::detail::f32x16;

/// 128-bit lanes of a and b: lane i of the result is lane L_i of a (L < 4) or of b (L >= 4).
template <int L0, int L1, int L2, int L3>
[[gnu::target("avx512f"), gnu::always_inline]] inline void lanes_of(const f32x16& a, const f32x16& b, f32x16& out) {
  out = __builtin_shufflevector(a, b, 4 * L0, 4 * L0 + 1, 4 * L0 + 2, 4 * L0 + 3, 4 * L1, 4 * L1 + 1, 4 * L1 + 2,
                                 4 * L1 + 3, 4 * L2, 4 * L2 + 1, 4 * L2 + 2, 4 * L2 + 3, 4 * L3, 4 * L3 + 1,
                                 4 * L3 + 2, 4 * L3 + 3);
}

/// r[0..16) turned: r[j] lane i = r[i] lane j before. Pairs of rows interleaved, then pairs of
/// pairs (as doubles), then 128-bit lanes across the four groups of four rows: 64 shuffles.
[[gnu::target("avx512f"), gnu::always_inline]] inline void transpose16(f32x16 (&r)[16]) {
  f32x16 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  // u[4g + c] holds, in lane L, column 4L + c of rows 4g .. 4g + 3
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    u[g] = __builtin_shufflevector(t[g], t[g + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    u[g + 1] = __builtin_shufflevector(t[g], t[g + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    u[g + 2] = __builtin_shufflevector(t[g + 1], t[g + 3], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    u[g + 3] = __builtin_shufflevector(t[g + 1], t[g + 3], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  // column 4L + c of all 16 rows: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    f32x16 ab_lo, ab_hi, cd_lo, cd_hi;
    lanes_of<0, 4, 1, 5>(u[c], u[4 + c], ab_lo);
    lanes_of<2, 6, 3, 7>(u[c], u[4 + c], ab_hi);
    lanes_of<0, 4, 1, 5>(u[8 + c], u[12 + c], cd_lo);
    lanes_of<2, 6, 3, 7>(u[8 + c], u[12 + c], cd_hi);
    lanes_of<0, 1, 4, 5>(ab_lo, cd_lo, r[c]);
    lanes_of<2, 3, 6, 7>(ab_lo, cd_lo, r[4 + c]);
    lanes_of<0, 1, 4, 5>(ab_hi, cd_hi, r[8 + c]);
    lanes_of<2, 3, 6, 7>(ab_hi, cd_hi, r[12 + c]);
  }
}

}  // namespace detail

/// dst [cols, rows] = src [rows, cols] (row stride ld): 16 x 16 blocks through registers, the
/// edges one element at a time.
[[gnu::target("avx512f")]] inline void transpose_into(std::int64_t rows, std::int64_t cols, const float* src,
                                                      std::int64_t ld, float* dst) {
  const std::int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  for (std::int64_t r0 = 0; r0 < rows16; r0 += 16)
    for (std::int64_t c0 = 0; c0 < cols16; c0 += 16) {
      detail::f32x16 x[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) x[i] = __builtin_bit_cast(detail::f32x16, _mm512_loadu_ps(src + (r0 + i) * ld + c0));
      detail::transpose16(x);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + (c0 + i) * rows + r0, __builtin_bit_cast(__m512, x[i]));
    }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = r < rows16 ? cols16 : 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

}  // namespace avx512
#endif

}  // namespace strata::kernels::cpu

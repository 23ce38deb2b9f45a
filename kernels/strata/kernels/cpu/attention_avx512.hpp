/// \file
/// Self-attention's per-head pieces on AVX-512 (float): the 16 x 16 transposes that turn a
/// head's keys or values into a product's untransposed operand, and the scores' softmax taken
/// while the scores are still in registers. A tile of R query rows against up to 128 keys is
/// multiplied as small_gemm_avx512.hpp's tiles are, then each row is masked (causally),
/// exponentiated, summed and normalised in place and stored once as probabilities: the scores
/// never go to memory and back, and the R rows' serial steps (the lanes' maximum, the sum, the
/// reciprocal) overlap instead of running one row at a time. The backward pass does the same
/// with dP = dO vᵀ and the softmax's backward, storing dS only.
///
/// The arithmetic is the unfused path's: the products' sums over k in order, e^{s (x - max)}
/// by fast_math.hpp's exp_shifted, y (dy - sum(dy y)) scaled as softmax.hpp's backward.
#pragma once

#include <cmath>  // INFINITY
#include <cstdint>
#include <type_traits>  // std::integral_constant

#include <strata/kernels/cpu/fast_math.hpp>       // exp_shifted, f32x16
#include <strata/kernels/cpu/small_gemm_avx512.hpp>  // STRATA_GEMM_AVX512
#include <strata/kernels/cpu/softmax.hpp>         // detail::horizontal_sum, detail::store_zeros

namespace strata::kernels::cpu {

#if defined(STRATA_GEMM_AVX512) && defined(STRATA_AVX512_PACKS)
#define STRATA_ATTENTION_AVX512 1
namespace avx512 {

/// The most keys a fused tile takes (8 vectors of 16).
inline constexpr std::int64_t kFusedKeys = 128;

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

/// The largest lane (NaN lanes aside).
[[gnu::target("avx512f"), gnu::always_inline]] inline float horizontal_max(const __m512& v) {
  using f32x8v = float __attribute__((vector_size(32)));
  using f32x4v = float __attribute__((vector_size(16)));
  const f32x16 x = __builtin_bit_cast(f32x16, v);
  const f32x8v a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7), b = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  const f32x8v h = a > b ? a : b;
  const f32x4v c = __builtin_shufflevector(h, h, 0, 1, 2, 3), d = __builtin_shufflevector(h, h, 4, 5, 6, 7);
  const f32x4v q = c > d ? c : d;
  const float m0 = q[0] > q[2] ? q[0] : q[2], m1 = q[1] > q[3] ? q[1] : q[3];
  return m0 > m1 ? m0 : m1;
}

/// acc[R][NV] = the rows of op(A) times B [k, 16 NV] as small_tile computes them (B's last
/// vector read under `last`, its other lanes 0).
template <int R, int NV>
[[gnu::target("avx512f"), gnu::always_inline]] inline void tile_product(std::int64_t k, const float* a, std::int64_t lda,
                                                                        const float* b, std::int64_t ldb, __mmask16 last,
                                                                        __m512 (&acc)[R][NV]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < k; ++p, b += ldb) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = v + 1 < NV ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(last, b + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
}

/// Stores row values x[NV] at row[0, 16 NV) (the last vector under `store_last`), then zeros
/// up to `cols`.
template <int NV>
[[gnu::target("avx512f"), gnu::always_inline]] inline void store_row(float* row, const __m512 (&x)[NV], __mmask16 store_last,
                                                                     std::int64_t cols) {
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    if (v + 1 < NV) _mm512_storeu_ps(row + 16 * v, x[v]);
    else _mm512_mask_storeu_ps(row + 16 * v, store_last, x[v]);
  }
  if (16 * NV < cols) cpu::detail::store_zeros(row, 16 * NV, cols);
}

/// The visible keys of tile row i: the first row sees vis0, each next one more under the
/// causal mask, all `keys` without it.
inline std::int64_t visible(std::int64_t vis0, std::int64_t i, bool causal, std::int64_t keys) {
  return causal ? (vis0 + i < keys ? vis0 + i : keys) : keys;
}

/// p[R rows, cols) = softmax(scale q kᵀ) of R query rows q (row stride ldq, d columns) over
/// keys whose transpose kt [d, keys] has row stride ldk; 16 (NV - 1) < keys <= 16 NV <= 128.
template <int R, int NV>
[[gnu::target("avx512f")]] inline void probs_tile(std::int64_t d, const float* q, std::int64_t ldq, const float* kt,
                                                  std::int64_t ldk, float scale, std::int64_t vis0, bool causal,
                                                  std::int64_t keys, float* p, std::int64_t ldp, std::int64_t cols) {
  const __mmask16 last = lanes_below(keys - 16 * (NV - 1)), store_last = lanes_below(cols - 16 * (NV - 1));
  __m512 acc[R][NV];
  tile_product<R, NV>(d, q, ldq, kt, ldk, last, acc);
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const std::int64_t vis = visible(vis0, i, causal, keys);
    __m512 top = minus_inf;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {  // masked keys: -inf, giving exactly 0
      acc[i][v] = _mm512_mask_mov_ps(minus_inf, lanes_below(vis - 16 * v), acc[i][v]);
      top = _mm512_mask_max_ps(top, 0xffff, top, acc[i][v]);
    }
    const float m = horizontal_max(top);
    f32x16 sum = f32x16{} + 0.0f;
    f32x16 e[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) cpu::detail::exp_shifted(__builtin_bit_cast(f32x16, acc[i][v]), scale, m, e[v], sum);
    const __m512 inv = _mm512_set1_ps(1.0f / cpu::detail::horizontal_sum(__builtin_bit_cast(__m512, sum)));
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(__builtin_bit_cast(__m512, e[v]), inv);
    store_row<NV>(p + i * ldp, acc[i], store_last, cols);
  }
}

/// ds[R rows, cols) = scale y (dy - sum(dy y)) with dy = dO vᵀ of R rows dO (row stride lddo,
/// d columns) against vt [d, keys] (row stride ldv), y the rows of the forward's p; masked
/// entries 0. 16 (NV - 1) < keys <= 16 NV <= 128.
template <int R, int NV>
[[gnu::target("avx512f")]] inline void dscores_tile(std::int64_t d, const float* dO, std::int64_t lddo, const float* vt,
                                                    std::int64_t ldv, const float* p, std::int64_t ldp, float scale,
                                                    std::int64_t vis0, bool causal, std::int64_t keys, float* ds,
                                                    std::int64_t ldds, std::int64_t cols) {
  const __mmask16 last = lanes_below(keys - 16 * (NV - 1)), store_last = lanes_below(cols - 16 * (NV - 1));
  __m512 acc[R][NV];
  tile_product<R, NV>(d, dO, lddo, vt, ldv, last, acc);
  const __m512 vscale = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const std::int64_t vis = visible(vis0, i, causal, keys);
    __m512 y[NV], lanes = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = lanes_below(vis - 16 * v);
      y[v] = _mm512_maskz_loadu_ps(m, p + i * ldp + 16 * v);
      lanes = _mm512_add_ps(lanes, _mm512_maskz_mul_ps(m, acc[i][v], y[v]));
    }
    const __m512 dot = _mm512_set1_ps(cpu::detail::horizontal_sum(lanes));
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[i][v] = _mm512_maskz_mul_ps(lanes_below(vis - 16 * v), _mm512_mul_ps(vscale, y[v]), _mm512_sub_ps(acc[i][v], dot));
    store_row<NV>(ds + i * ldds, acc[i], store_last, cols);
  }
}

/// Rows [0, m) of query rows in tiles of R (as many accumulators as the registers hold), then
/// single rows; row i's first visible count is vis0 + i under the mask.
template <int NV, class Tile1, class TileR>
inline void by_tiles(std::int64_t m, TileR&& tile_r, Tile1&& tile_1) {
  constexpr int R = NV <= 2 ? 8 : NV <= 4 ? 4 : 2;
  std::int64_t i = 0;
  for (; i + R <= m; i += R) tile_r(i);
  for (; i < m; ++i) tile_1(i);
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

/// p [m, cols] = softmax(scale q kᵀ) of m query rows q [m, d] (row stride ldq) over the keys
/// [0, keys) whose transpose is kt [d, keys] (row stride ldk); query row i sees the keys
/// [0, vis0 + i] ∩ [0, keys) when causal (vis0 >= 1), all of them otherwise; the other entries
/// of its row are 0 up to cols. 1 <= keys <= min(cols, kFusedKeys).
[[gnu::target("avx512f")]] inline void attention_probs(std::int64_t m, std::int64_t d, const float* q, std::int64_t ldq,
                                                       const float* kt, std::int64_t ldk, float scale, std::int64_t vis0,
                                                       bool causal, std::int64_t keys, float* p, std::int64_t ldp,
                                                       std::int64_t cols) {
  auto run = [&]<int NV>(std::integral_constant<int, NV>) {
    constexpr int R = NV <= 2 ? 8 : NV <= 4 ? 4 : 2;
    detail::by_tiles<NV>(
        m,
        [&](std::int64_t i) {
          detail::probs_tile<R, NV>(d, q + i * ldq, ldq, kt, ldk, scale, vis0 + i, causal, keys, p + i * ldp, ldp, cols);
        },
        [&](std::int64_t i) {
          detail::probs_tile<1, NV>(d, q + i * ldq, ldq, kt, ldk, scale, vis0 + i, causal, keys, p + i * ldp, ldp, cols);
        });
  };
  switch ((keys + 15) / 16) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    default: return run(std::integral_constant<int, 8>{});
  }
}

/// ds [m, cols] = the scaled softmax's backward of dy = dO vᵀ for m rows dO [m, d] (row
/// stride lddo) against vt [d, keys] (row stride ldv), from the forward's p [m, cols]
/// (row stride ldp); the visible entries as attention_probs's, the others 0 up to cols.
[[gnu::target("avx512f")]] inline void attention_dscores(std::int64_t m, std::int64_t d, const float* dO,
                                                         std::int64_t lddo, const float* vt, std::int64_t ldv,
                                                         const float* p, std::int64_t ldp, float scale, std::int64_t vis0,
                                                         bool causal, std::int64_t keys, float* ds, std::int64_t ldds,
                                                         std::int64_t cols) {
  auto run = [&]<int NV>(std::integral_constant<int, NV>) {
    constexpr int R = NV <= 2 ? 8 : NV <= 4 ? 4 : 2;
    detail::by_tiles<NV>(
        m,
        [&](std::int64_t i) {
          detail::dscores_tile<R, NV>(d, dO + i * lddo, lddo, vt, ldv, p + i * ldp, ldp, scale, vis0 + i, causal, keys,
                                      ds + i * ldds, ldds, cols);
        },
        [&](std::int64_t i) {
          detail::dscores_tile<1, NV>(d, dO + i * lddo, lddo, vt, ldv, p + i * ldp, ldp, scale, vis0 + i, causal, keys,
                                      ds + i * ldds, ldds, cols);
        });
  };
  switch ((keys + 15) / 16) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    default: return run(std::integral_constant<int, 8>{});
  }
}

}  // namespace avx512
#endif

}  // namespace strata::kernels::cpu

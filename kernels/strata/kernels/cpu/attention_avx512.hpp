/// \file
/// Self-attention's per-head pieces on AVX-512 (float): the scores' softmax taken
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
#include <strata/kernels/cpu/transpose_avx512.hpp>  // transpose_into: a head's keys or values turned

namespace strata::kernels::cpu {

#if defined(STRATA_GEMM_AVX512) && defined(STRATA_AVX512_PACKS)
#define STRATA_ATTENTION_AVX512 1
namespace avx512 {

/// The most keys a fused tile takes (8 vectors of 16).
inline constexpr std::int64_t kFusedKeys = 128;

namespace detail {
using cpu::detail::f32x16;

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

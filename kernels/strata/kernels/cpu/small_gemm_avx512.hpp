/// \file
/// Products small enough that B stays in L1 (attention's per-head products: 16 query rows
/// against up to a few hundred keys of 32 to 128 columns), with AVX-512 and B read where it
/// lies. A general GEMM call packs B into panels and dispatches through its blocking first,
/// which at these sizes costs about as much as the products; here each call is one sweep of
/// micro-tiles of R rows by up to 64 columns, the last columns under a mask.
///
/// The sums run over k in order from zero with one FMA each, and C is added once at the end:
/// what gemm_avx512 computes for k <= its depth block, and the same contract (C = A B, or
/// C += A B) as gemm with alpha 1 and beta 0 or 1.
#pragma once

#include <algorithm>
#include <cstdint>

#include <strata/kernels/cpu/gemm_avx512.hpp>  // STRATA_GEMM_AVX512

namespace strata::kernels::cpu {

#ifdef STRATA_GEMM_AVX512
namespace avx512 {

/// C[0:R, 0:16 NV] (+)= sum_p A(i, p) B(p, :), the last vector of columns masked by `last`.
/// A(i, p) is a[i * lda + p], or a[p * lda + i] when kTransA; B(p, j) is b[p * ldb + j].
template <int R, int NV, bool kTransA>
[[gnu::target("avx512f")]] inline void small_tile(std::int64_t k, const float* a, std::int64_t lda, const float* b,
                                                  std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate,
                                                  __mmask16 last) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < k; ++p, b += ldb) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = v + 1 < NV ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(last, b + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(kTransA ? a[p * lda + i] : a[i * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* ci = c + i * ldc + 16 * v;
      const __mmask16 m = v + 1 < NV ? static_cast<__mmask16>(0xffff) : last;
      __m512 x = acc[i][v];
      if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, ci), x);
      _mm512_mask_storeu_ps(ci, m, x);
    }
}

/// Rows [0, m) of one band of 16 NV columns: tiles of R rows, then single rows.
template <int NV, bool kTransA>
[[gnu::target("avx512f")]] inline void small_rows(std::int64_t m, std::int64_t k, const float* a, std::int64_t lda,
                                                  const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                                                  bool accumulate, __mmask16 last) {
  constexpr int R = NV <= 2 ? 8 : 4;  // 16 accumulators; the B vectors and A's broadcast fit beside them
  const std::int64_t step = kTransA ? 1 : lda;  // from one row of op(A) to the next
  std::int64_t i = 0;
  for (; i + R <= m; i += R) small_tile<R, NV, kTransA>(k, a + i * step, lda, b, ldb, c + i * ldc, ldc, accumulate, last);
  for (; i < m; ++i) small_tile<1, NV, kTransA>(k, a + i * step, lda, b, ldb, c + i * ldc, ldc, accumulate, last);
}
template <int NV>
[[gnu::target("avx512f")]] inline void small_band(bool trans_a, std::int64_t m, std::int64_t k, const float* a,
                                                  std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                                                  std::int64_t ldc, bool accumulate, __mmask16 last) {
  if (trans_a)
    small_rows<NV, true>(m, k, a, lda, b, ldb, c, ldc, accumulate, last);
  else
    small_rows<NV, false>(m, k, a, lda, b, ldb, c, ldc, accumulate, last);
}

/// C [m, n] = op(A) B, or C += op(A) B with `accumulate`; op(A) is A [m, k] (row stride lda),
/// or Aᵀ for A [k, m] with `trans_a`; B [k, n] with row stride ldb; C with row stride ldc.
[[gnu::target("avx512f")]] inline void small_gemm(bool trans_a, std::int64_t m, std::int64_t n, std::int64_t k,
                                                  const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                                  float* c, std::int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;  // C may have no storage: no pointer into it is formed
  if (k == 0) {  // op(A) B is zero, and A and B may have no storage
    if (!accumulate)
      for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  for (std::int64_t j0 = 0; j0 < n; j0 += 64) {
    const std::int64_t w = n - j0 < 64 ? n - j0 : 64;
    const int nv = static_cast<int>((w + 15) / 16), tail = static_cast<int>(w % 16);
    const auto last = static_cast<__mmask16>(tail == 0 ? 0xffff : (1u << tail) - 1);
    const float* bj = b + j0;
    float* cj = c + j0;
    const auto band = nv == 1 ? &small_band<1> : nv == 2 ? &small_band<2> : nv == 3 ? &small_band<3> : &small_band<4>;
    band(trans_a, m, k, a, lda, bj, ldb, cj, ldc, accumulate, last);
  }
}

}  // namespace avx512
#endif

}  // namespace strata::kernels::cpu

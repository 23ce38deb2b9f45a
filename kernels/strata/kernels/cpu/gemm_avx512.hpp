/// \file
/// strata's own single-precision GEMM for x86-64 CPUs with AVX-512, for when OpenBLAS runs
/// narrower kernels than the CPU has (an OPENBLAS_CORETYPE that pins AVX2 kernels, or a release
/// that does not know the CPU): on a Zen 5 core pinned to OpenBLAS's Haswell kernels it runs
/// the Transformer's and the ResNet's shapes about twice as fast (docs/performance.md, "GEMM
/// kernels"). gemm.hpp decides when it runs.
///
/// The layout is Goto's, with one change for the tall-and-narrow products of training
/// (thousands of rows, N and K of 128 to 512): A is not packed. Packing A costs a pass over
/// it for every block of columns, as much as the products themselves when N is 128; instead
/// the 12 x 32 micro-kernel broadcasts A's elements from where they lie (12 rows a step, or
/// 12 consecutive elements of a row when A is transposed). B is packed once per block into
/// 32-column panels, zero-padded (read in place, its rows' power-of-two strides map a panel
/// onto a few L1 sets: 15-25 % slower on the weight gradients' shapes from a cold cache), so
/// edge tiles run the same kernel under store masks.
#pragma once

#include <algorithm>  // std::min
#include <array>
#include <cstdint>
#include <utility>  // std::integer_sequence
#include <vector>

#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f
#include <strata/kernels/cpu/gemm_epilogue.hpp>
#include <strata/kernels/math/gemm_args.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_GEMM_AVX512 1
#include <immintrin.h>
#endif

namespace strata::kernels::cpu {

#ifdef STRATA_GEMM_AVX512
namespace avx512 {

inline constexpr int kMR = 12;                  // rows of a micro-tile: 24 of the 32 vector registers hold C
inline constexpr int kNR = 32;                  // columns: two vectors of 16 floats
inline constexpr std::int64_t kKC = 256;        // a B panel, kKC x kNR, is 32 KiB: it stays in L1
inline constexpr std::int64_t kMC = 16 * kMR;   // rows of A swept over one packed block of B (L2)
inline constexpr std::int64_t kNC = 1024;       // columns of B packed at once (1 MiB)
inline constexpr std::int64_t kGatherMaxLd = (std::int64_t{1} << 31) / 4 / kNR;  // 32-bit gather offsets

/// The lanes [0, n) of a vector: none for n <= 0, all for n >= 16.
inline __mmask16 lanes_below(std::int64_t n) {
  return n <= 0 ? static_cast<__mmask16>(0) : n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

/// The load/store masks of a 32-column tile that is w columns wide (0 < w <= 32).
[[gnu::target("avx512f")]] inline void column_masks(int w, __mmask16& lo, __mmask16& hi) {
  lo = lanes_below(w);
  hi = lanes_below(w - 16);
}

/// What a tile adds as it stores C, on the last block of the depth (GemmArgs' epilogue):
/// the column bias of its columns, the row bias of its rows, the ReLU; null / false for none.
struct TileEpilogue {
  const float* col_bias = nullptr;
  const float* row_bias = nullptr;
  bool relu = false;
};

/// Asks for the line at p in a state that can be written (PREFETCHW). A store to a line that is
/// not in the cache waits for the line to be read first; a layer's output written from cold
/// (its rows last touched a step ago) held a tile's stores on those reads, from memory.
[[gnu::target("avx512f")]] inline void prefetch_for_write(const float* p) { asm volatile("prefetchw %0" : : "m"(*p)); }

/// The tile's C lines (R rows of two 64-byte lines, the second only where the tile reaches it)
/// asked for writing, one in each of the depth loop's first 2R steps: the reads overlap the
/// tile's products instead of its stores. 2048 x 512 x 128 with C last written long before
/// (other outputs in between): 113.6 -> 131.3 GFLOP/s, with C in memory 106.4 -> 116.7.
[[gnu::target("avx512f")]] inline void prefetch_tile_row(std::int64_t p, int rows, float* c, std::int64_t ldc,
                                                         __mmask16 m1) {
  if (p < 2 * rows && ((p & 1) == 0 || m1 != 0)) prefetch_for_write(c + (p >> 1) * ldc + (p & 1) * 16);
}

/// Stores a tile's R rows of accumulators (lo: columns 0-15, hi: 16-31, masked by m0 and m1):
/// C = alpha * acc + (load_c ? beta * C : 0), then the epilogue e. The kernels over other
/// operand types (gemm_bf16.hpp) store their tiles through it too.
template <int R>
[[gnu::target("avx512f"), gnu::always_inline]] inline void store_tile(const __m512 (&lo)[R], const __m512 (&hi)[R], float* c,
                                                                     std::int64_t ldc, float alpha, float beta, bool load_c,
                                                                     __mmask16 m0, __mmask16 m1, const TileEpilogue& e) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta), zero = _mm512_setzero_ps();
  const __m512 cb0 = e.col_bias ? _mm512_maskz_loadu_ps(m0, e.col_bias) : zero;
  const __m512 cb1 = e.col_bias ? _mm512_maskz_loadu_ps(m1, e.col_bias + 16) : zero;
  const bool whole = (m0 & m1) == 0xffff;
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    __m512 x0 = _mm512_mul_ps(lo[i], va), x1 = _mm512_mul_ps(hi[i], va);
    if (load_c) {
      x0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, ci), vb, x0);
      x1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, ci + 16), vb, x1);
    }
    if (e.col_bias) {
      x0 = _mm512_add_ps(x0, cb0);
      x1 = _mm512_add_ps(x1, cb1);
    }
    if (e.row_bias) {
      const __m512 rb = _mm512_set1_ps(e.row_bias[i]);
      x0 = _mm512_add_ps(x0, rb);
      x1 = _mm512_add_ps(x1, rb);
    }
    if (e.relu) {  // x > 0 ? x : 0, as the scalar pass: NaN and -0 give +0
      x0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x0, zero, _CMP_GT_OQ), x0);
      x1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x1, zero, _CMP_GT_OQ), x1);
    }
    if (whole) {  // (a masked store that misses the cache costs several plain ones on AMD cores)
      _mm512_storeu_ps(ci, x0);
      _mm512_storeu_ps(ci + 16, x1);
    } else {
      _mm512_mask_storeu_ps(ci, m0, x0);
      _mm512_mask_storeu_ps(ci + 16, m1, x1);
    }
  }
}

/// C[0:R, 0:32] (masked by m0, m1) = alpha * sum_p A(i, p) B(p, :) + (load_c ? beta * C : 0),
/// then the epilogue e. A(i, p) is a[i * lda + p], or a[p * lda + i] when kTransA; bp is a
/// packed B panel. kRowSums (with kTransA): row_sums[0:R] += sum_p A(i, p) as well, the R
/// values of A's row p one masked load (two of the 32 registers, beside the tile's 24).
template <int R, bool kTransA, bool kRowSums = false>
[[gnu::target("avx512f")]] inline void micro_tile(std::int64_t kc, const float* a, std::int64_t lda,
                                                  const float* bp, float* c, std::int64_t ldc, float alpha,
                                                  float beta, bool load_c, __mmask16 m0, __mmask16 m1,
                                                  const TileEpilogue& e, float* row_sums) {
  static_assert(kTransA || !kRowSums, "row sums are taken from a transposed A");
  __m512 lo[R], hi[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  if constexpr (kTransA) {
    [[maybe_unused]] const auto rows = static_cast<__mmask16>((1u << R) - 1);
    [[maybe_unused]] __m512 sums = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < kc; ++p, a += lda, bp += kNR) {
      const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
      // A's rows lie lda apart, a stride the hardware prefetcher does not follow in time.
      __builtin_prefetch(a + 8 * lda);
      prefetch_tile_row(p, R, c, ldc, m1);
      if constexpr (kRowSums) sums = _mm512_add_ps(sums, _mm512_maskz_loadu_ps(rows, a));
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i]);
        lo[i] = _mm512_fmadd_ps(ai, b0, lo[i]);
        hi[i] = _mm512_fmadd_ps(ai, b1, hi[i]);
      }
    }
    if constexpr (kRowSums)
      _mm512_mask_storeu_ps(row_sums, rows, _mm512_add_ps(_mm512_maskz_loadu_ps(rows, row_sums), sums));
  } else {
    // Rows i, i + 1 and i + 2 off one pointer: [r], [r + lda * 4] and [r + lda * 8] are single
    // addressing modes, so four pointers and lda cover the 12 rows.
    const float* r[(R + 2) / 3];
#pragma GCC unroll 4
    for (int q = 0; q < (R + 2) / 3; ++q) r[q] = a + 3 * q * lda;
    for (std::int64_t p = 0; p < kc; ++p, bp += kNR) {
      const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
      prefetch_tile_row(p, R, c, ldc, m1);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const __m512 ai = _mm512_set1_ps(r[i / 3][(i % 3) * lda + p]);
        lo[i] = _mm512_fmadd_ps(ai, b0, lo[i]);
        hi[i] = _mm512_fmadd_ps(ai, b1, hi[i]);
      }
    }
  }
  store_tile<R>(lo, hi, c, ldc, alpha, beta, load_c, m0, m1, e);
}

using TileFn = void (*)(std::int64_t, const float*, std::int64_t, const float*, float*, std::int64_t, float, float,
                        bool, __mmask16, __mmask16, const TileEpilogue&, float*);

template <bool kTransA, bool kRowSums, int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&micro_tile<R + 1, kTransA, kRowSums>...};
}

/// col_sums[0:w] += the kc rows of a packed panel summed (its padding is zeros).
[[gnu::target("avx512f")]] inline void add_panel_sums(const float* panel, std::int64_t kc, int w, float* col_sums) {
  __mmask16 m0, m1;
  column_masks(w, m0, m1);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < kc; ++p) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(panel + p * kNR));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(panel + p * kNR + 16));
  }
  _mm512_mask_storeu_ps(col_sums, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, col_sums), s0));
  _mm512_mask_storeu_ps(col_sums + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, col_sums + 16), s1));
}

/// Packs B[p0:p0+kc, j0:j0+nc] into panels of kNR columns (zero-padded): panel j at dst + j * kc.
/// With col_sums, col_sums[j0 + j] += sum_p B(p0 + p, j0 + j), from each panel as it is packed
/// (still in L1).
[[gnu::target("avx512f")]] inline void pack_b(const math::GemmArgs<float>& g, std::int64_t p0, std::int64_t kc,
                                              std::int64_t j0, std::int64_t nc, float* dst, float* col_sums) {
  for (std::int64_t jr = 0; jr < nc; jr += kNR, dst += kc * kNR) {
    const auto w = static_cast<int>(std::min<std::int64_t>(kNR, nc - jr));
    if (!g.trans_b) {
      __mmask16 m0, m1;
      column_masks(w, m0, m1);
      const float* src = g.b + p0 * g.ldb + j0 + jr;
      for (std::int64_t p = 0; p < kc; ++p, src += g.ldb) {
        _mm512_storeu_ps(dst + p * kNR, _mm512_maskz_loadu_ps(m0, src));
        _mm512_storeu_ps(dst + p * kNR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
    } else if (g.ldb <= kGatherMaxLd) {  // B(p, j) = b[j * ldb + p]: a panel row gathers a column of b's rows
      __mmask16 m0, m1;
      column_masks(w, m0, m1);
      const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(static_cast<int>(g.ldb)));
      const float* src = g.b + (j0 + jr) * g.ldb + p0;
      const float* src_hi = m1 ? src + 16 * g.ldb : src;  // not formed past b when no lane reads it
      for (std::int64_t p = 0; p < kc; ++p) {
        _mm512_storeu_ps(dst + p * kNR, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, rows, src + p, 4));
        _mm512_storeu_ps(dst + p * kNR + 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, rows, src_hi + p, 4));
      }
    } else {  // rows too far apart for 32-bit gather offsets
      for (int j = 0; j < kNR; ++j) {
        const float* src = g.b + (j0 + jr + j) * g.ldb + p0;
        for (std::int64_t p = 0; p < kc; ++p) dst[p * kNR + j] = j < w ? src[p] : 0.0f;
      }
    }
    if (col_sums != nullptr) add_panel_sums(dst, kc, w, col_sums + j0 + jr);
  }
}

}  // namespace avx512

namespace avx512 {

/// gemm_avx512 with b_col_sums[j] += sum_p op(B)(p, j) taken as B is packed (the transposed
/// route's op(A) row sums); g.a_row_sums taken by the tiles where A is transposed.
[[gnu::target("avx512f")]] inline void gemm(const math::GemmArgs<float>& g, float* b_col_sums) {
  if (g.m == 0 || g.n == 0) {
    add_a_row_sums(g);
    return;
  }
  if (g.k == 0 || g.alpha == 0.0f) {
    scale_by_beta(g);
    add_a_row_sums(g);  // (b_col_sums come from the transposed route, which has k > 0 and alpha != 0)
    return apply_epilogue(g);
  }
  // Few rows against many columns: packing B (K x N) costs more than the products of the M
  // rows it feeds, by gathers when B is transposed (a convolution's weight gradient,
  // dW [OC, R] = G colsᵀ), by copies of a deep B otherwise (its forward pass, W cols).
  // Cᵀ = op(B)ᵀ op(A)ᵀ packs op(A)ᵀ instead, K x M; Cᵀ lands in a scratch that is then turned
  // into C (N x M moves against N x M x K products, hence a deep product for the copies' case),
  // the epilogue with them. op(A)'s row sums are then the packed operand's column sums.
  if (g.n > g.m && (g.trans_b || g.k >= std::max<std::int64_t>(128, 4 * g.m))) {
    thread_local std::vector<float> flipped;
    flipped.resize(static_cast<std::size_t>(g.n * g.m));
    gemm({!g.trans_b, !g.trans_a, g.n, g.m, g.k, g.alpha, g.b, g.ldb, g.a, g.lda, 0.0f, flipped.data(), g.m}, g.a_row_sums);
    store_transposed(g, flipped.data());
    return;
  }
  static constexpr auto plain = tile_table<false, false>(std::make_integer_sequence<int, kMR>{});
  static constexpr auto transposed = tile_table<true, false>(std::make_integer_sequence<int, kMR>{});
  static constexpr auto summing = tile_table<true, true>(std::make_integer_sequence<int, kMR>{});
  const auto& tiles = g.trans_a ? transposed : plain;
  // A's row sums: by the tiles of the first column panel where A is transposed (its rows of
  // 12 contiguous), else a pass of their own.
  const bool tile_sums = g.a_row_sums != nullptr && g.trans_a;
  if (g.a_row_sums != nullptr && !g.trans_a) add_a_row_sums(g);
  thread_local std::vector<float> packed;  // B's panels
  packed.resize(static_cast<std::size_t>(kKC * (kNC + kNR)));
  for (std::int64_t jc = 0; jc < g.n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, g.n - jc);
    for (std::int64_t pc = 0; pc < g.k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, g.k - pc);
      pack_b(g, pc, kc, jc, nc, packed.data(), b_col_sums);
      const bool first = pc == 0, last = pc + kc >= g.k;
      const float beta = first ? g.beta : 1.0f;
      const bool load_c = !first || g.beta != 0.0f;
      for (std::int64_t ic = 0; ic < g.m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, g.m - ic);
        for (std::int64_t jr = 0; jr < nc; jr += kNR) {
          const auto w = static_cast<int>(std::min<std::int64_t>(kNR, nc - jr));
          __mmask16 m0, m1;
          column_masks(w, m0, m1);
          const float* bp = packed.data() + jr * kc;
          float* cj = g.c + jc + jr;
          TileEpilogue e;
          if (last) e = {g.col_bias ? g.col_bias + jc + jr : nullptr, nullptr, g.relu};
          const bool sums = tile_sums && jc == 0 && jr == 0;
          const auto& run = sums ? summing : tiles;
          for (std::int64_t ir = 0; ir < mc; ir += kMR) {
            const std::int64_t i = ic + ir;
            const auto rows = static_cast<int>(std::min<std::int64_t>(kMR, mc - ir));
            const float* a = g.trans_a ? g.a + pc * g.lda + i : g.a + i * g.lda + pc;
            if (last && g.row_bias) e.row_bias = g.row_bias + i;
            run[static_cast<std::size_t>(rows - 1)](kc, a, g.lda, bp, cj + i * g.ldc, g.ldc, g.alpha, beta, load_c, m0, m1,
                                                    e, sums ? g.a_row_sums + i : nullptr);
          }
        }
      }
    }
  }
}

}  // namespace avx512

/// C = alpha * op(A) * op(B) + beta * C, then g's epilogue, in float with strata's AVX-512
/// kernel (see the file comment), and A's row sums where g asks for them. Call only where
/// has_avx512f(); beta == 0 overwrites C without reading it.
[[gnu::target("avx512f")]] inline void gemm_avx512(const math::GemmArgs<float>& g) { avx512::gemm(g, nullptr); }
#endif

}  // namespace strata::kernels::cpu

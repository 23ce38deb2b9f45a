/// \file
/// The AVX512-BF16 kernel of gemm_bf16 (gemm_bf16.hpp): a 12 x 32 micro-kernel of VDPBF16PS,
/// each instruction 16 lanes of two products. Both operands are packed as bfloat16 pairs along
/// the depth: B once per block into 32-column panels as gemm_avx512.hpp packs it, A once per
/// block of rows. The blocking, the wide-and-short route (Cᵀ = op(B)ᵀ op(A)ᵀ), the tiles' store
/// and epilogue are the float kernel's. The AMX kernel (gemm_amx.hpp) packs its operands with
/// the same functions, padded to its tiles.
#pragma once

#include <algorithm>  // std::min, std::fill_n
#include <array>
#include <cstdint>
#include <utility>  // std::integer_sequence
#include <vector>

#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/cpu/gemm_avx512.hpp>
#include <strata/kernels/cpu/gemm_epilogue.hpp>
#include <strata/kernels/math/bfloat16.hpp>
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

#ifdef STRATA_GEMM_AVX512
namespace avx512_bf16 {

inline constexpr int kMR = avx512::kMR;               // 12 rows of a micro-tile: 24 registers hold C
inline constexpr int kNR = avx512::kNR;               // 32 columns: two vectors of 16 floats
inline constexpr std::int64_t kKC = 512;              // depth of a block (even): its B panel, 256 pairs x 32, is 32 KiB
inline constexpr std::int64_t kMC = 16 * kMR;         // rows of A packed and swept over one block of B
inline constexpr std::int64_t kNC = avx512::kNC;      // columns of B packed at once
inline constexpr std::int64_t kGatherMaxLd = (std::int64_t{1} << 31) / 4 / 16;  // 32-bit gather offsets, 16 columns

/// A u32 lane of a packed operand: two bfloat16, the even depth in the low half, as VDPBF16PS
/// pairs them (lane l of the product: a.lo * b.lo + a.hi * b.hi).
using Pair = std::uint32_t;

/// Lanes l = 0-15 of the result: (even[l], odd[l]) rounded to bfloat16, one pair per u32 lane.
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline __m512i pairs_of(__m512 even, __m512 odd) {
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                                21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                                11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const auto both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // bf16 0-15 from even, 16-31 from odd
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), both);
}

/// Packs op(B)[p0:p0+kc, j0:j0+nc] into panels of kNR columns, `rows` >= kq = ceil(kc / 2)
/// rows of kNR pairs each (panel j at dst + j * rows; 0: kq): pair (q, c) = (B(p0 + 2q, c),
/// B(p0 + 2q + 1, c)), zeros past kc and past nc.
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void pack_b(const math::GemmArgs<float>& g, std::int64_t p0,
                                                                  std::int64_t kc, std::int64_t j0, std::int64_t nc,
                                                                  Pair* dst, std::int64_t rows = 0) {
  const std::int64_t kq = (kc + 1) / 2;
  if (rows == 0) rows = kq;
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t jr = 0; jr < nc; jr += kNR, dst += rows * kNR) {
    std::fill_n(dst + kq * kNR, (rows - kq) * kNR, Pair{0});
    const std::int64_t w = std::min<std::int64_t>(kNR, nc - jr);
    if (!g.trans_b) {  // B(p, j) = b[p * ldb + j]: two rows of b make a panel row
      const __mmask16 m[2] = {avx512::lanes_below(w), avx512::lanes_below(w - 16)};
      const float* src = g.b + p0 * g.ldb + j0 + jr;
      for (std::int64_t q = 0; q < kq; ++q, src += 2 * g.ldb) {
        const bool odd = 2 * q + 1 < kc;
        for (int h = 0; h < 2; ++h) {
          const __m512 e = _mm512_maskz_loadu_ps(m[h], src + 16 * h);
          const __m512 o = odd ? _mm512_maskz_loadu_ps(m[h], src + g.ldb + 16 * h) : zero;
          _mm512_storeu_si512(dst + q * kNR + 16 * h, pairs_of(e, o));
        }
      }
    } else if (g.ldb <= kGatherMaxLd) {  // B(p, j) = b[j * ldb + p]: a pair is two floats of one row of b
      const __m256i rows8 = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(g.ldb)));
      const __m512i rows16 = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(static_cast<int>(g.ldb)));
      for (int h = 0; h < 2; ++h) {
        const std::int64_t wh = std::min<std::int64_t>(16, w - 16 * h);
        Pair* out = dst + 16 * h;
        if (wh <= 0) {
          for (std::int64_t q = 0; q < kq; ++q) _mm512_storeu_si512(out + q * kNR, _mm512_setzero_si512());
          continue;
        }
        const auto lo8 = static_cast<__mmask8>(avx512::lanes_below(std::min<std::int64_t>(wh, 8)));
        const auto hi8 = static_cast<__mmask8>(avx512::lanes_below(wh - 8));
        const float* col = g.b + (j0 + jr + 16 * h) * g.ldb + p0;
        const float* col8 = hi8 != 0 ? col + 8 * g.ldb : col;  // not formed past b when no lane reads it
        std::int64_t q = 0;
        for (; 2 * q + 1 < kc; ++q) {  // 8 columns' pairs a gather, in column order: the panel row as it lies
          const __m512i lo = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), lo8, rows8, col + 2 * q, 4);
          const __m512i hi = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), hi8, rows8, col8 + 2 * q, 4);
          _mm512_storeu_si512(out + q * kNR, (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo)));
        }
        if (q < kq) {  // an odd depth: the last pair's second half is zero
          const __m512 e = _mm512_mask_i32gather_ps(zero, avx512::lanes_below(wh), rows16, col + 2 * q, 4);
          _mm512_storeu_si512(out + q * kNR, pairs_of(e, zero));
        }
      }
    } else {  // rows too far apart for 32-bit gather offsets
      for (std::int64_t q = 0; q < kq; ++q)
        for (int j = 0; j < kNR; ++j) {
          const float* src = g.b + (j0 + jr + j) * g.ldb + p0 + 2 * q;
          const std::uint32_t e = j < w ? math::bf16_bits(src[0]) : 0;
          const std::uint32_t o = j < w && 2 * q + 1 < kc ? math::bf16_bits(src[1]) : 0;
          dst[q * kNR + j] = e | o << 16;
        }
    }
  }
}

/// Packs op(A)[i0:i0+mc, p0:p0+kc] as bfloat16. A read by rows (not trans_a): row i at
/// dst + i * stride (0: kq = ceil(kc / 2)), its depth in order (a zero past an odd kc, zero
/// pairs from kq to the stride). A transposed: pair (q, i) at dst[q * ld + i], ld = mc rounded
/// up to 16 (zeros past mc), its two halves from two rows of a.
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void pack_a(const math::GemmArgs<float>& g, std::int64_t i0,
                                                                  std::int64_t mc, std::int64_t p0, std::int64_t kc,
                                                                  Pair* dst, std::int64_t stride = 0) {
  const std::int64_t kq = (kc + 1) / 2;
  if (!g.trans_a) {
    if (stride == 0) stride = kq;
    for (std::int64_t i = 0; i < mc; ++i) {
      const float* src = g.a + (i0 + i) * g.lda + p0;
      std::fill_n(dst + i * stride + kq, stride - kq, Pair{0});
      auto* out = reinterpret_cast<std::uint16_t*>(dst + i * stride);
      for (std::int64_t p = 0; p < kc; p += 32) {
        const __m512 lo = _mm512_maskz_loadu_ps(avx512::lanes_below(kc - p), src + p);
        const __m512 hi = _mm512_maskz_loadu_ps(avx512::lanes_below(kc - p - 16), src + p + 16);
        const std::int64_t stored = std::min<std::int64_t>(32, 2 * kq - p);  // the odd depth's zero too
        const auto mask = static_cast<__mmask32>(stored >= 32 ? 0xffffffffu : (1u << stored) - 1);
        _mm512_mask_storeu_epi16(out + p, mask, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    return;
  }
  const std::int64_t ld = (mc + 15) / 16 * 16;
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t q = 0; q < kq; ++q) {
    const float* even = g.a + (p0 + 2 * q) * g.lda + i0;
    const bool odd = 2 * q + 1 < kc;
    for (std::int64_t i = 0; i < mc; i += 16) {
      const __mmask16 m = avx512::lanes_below(mc - i);
      const __m512 e = _mm512_maskz_loadu_ps(m, even + i);
      const __m512 o = odd ? _mm512_maskz_loadu_ps(m, even + g.lda + i) : zero;
      _mm512_storeu_si512(dst + q * ld + i, pairs_of(e, o));
    }
  }
}

/// C[0:R, 0:32] (masked by m0, m1) = alpha * sum_q A(i, q) . B(q, :) + (load_c ? beta * C : 0),
/// then the epilogue e, over kq packed pairs of depth: A's pair (i, q) at a[i * sa + q], or at
/// a[q * sa + i] when kTransA; bp a packed B panel.
template <int R, bool kTransA>
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void micro_tile(std::int64_t kq, const Pair* a, std::int64_t sa,
                                                                      const Pair* bp, float* c, std::int64_t ldc,
                                                                      float alpha, float beta, bool load_c, __mmask16 m0,
                                                                      __mmask16 m1, const avx512::TileEpilogue& e) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  if constexpr (kTransA) {
    for (std::int64_t q = 0; q < kq; ++q, a += sa, bp += kNR) {
      const auto b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
      avx512::prefetch_tile_row(q, R, c, ldc, m1);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const auto ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
        lo[i] = _mm512_dpbf16_ps(lo[i], ai, b0);
        hi[i] = _mm512_dpbf16_ps(hi[i], ai, b1);
      }
    }
  } else {
    // Rows i, i + 1 and i + 2 off one pointer, as the float kernel reads A: four pointers and sa.
    const Pair* r[(R + 2) / 3];
#pragma GCC unroll 4
    for (int t = 0; t < (R + 2) / 3; ++t) r[t] = a + 3 * t * sa;
    for (std::int64_t q = 0; q < kq; ++q, bp += kNR) {
      const auto b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
      avx512::prefetch_tile_row(q, R, c, ldc, m1);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const auto ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(r[i / 3][(i % 3) * sa + q]));
        lo[i] = _mm512_dpbf16_ps(lo[i], ai, b0);
        hi[i] = _mm512_dpbf16_ps(hi[i], ai, b1);
      }
    }
  }
  avx512::store_tile<R>(lo, hi, c, ldc, alpha, beta, load_c, m0, m1, e);
}

/// n pairs of v's storage from a 64-byte boundary: a B panel row that straddles two lines costs
/// each of the micro-kernel's vector loads two.
inline Pair* aligned_to_line(std::vector<Pair>& v, std::int64_t n) {
  v.resize(static_cast<std::size_t>(n + 16));
  const auto at = reinterpret_cast<std::uintptr_t>(v.data());
  return v.data() + ((64 - at % 64) % 64) / sizeof(Pair);
}

using TileFn = void (*)(std::int64_t, const Pair*, std::int64_t, const Pair*, float*, std::int64_t, float, float, bool,
                        __mmask16, __mmask16, const avx512::TileEpilogue&);

template <bool kTransA, int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&micro_tile<R + 1, kTransA>...};
}

/// What both bfloat16 kernels do before packing, true where that finishes the product: op(A)'s
/// row sums from the float operand (a bias gradient in float precision); an empty C; C = beta C
/// and the epilogue where nothing is multiplied; and few rows against many columns with B read
/// transposed, whose gathers would cost more than the products of the few rows they feed, run
/// as Cᵀ = op(B)ᵀ op(A)ᵀ by `kernel` (the float kernel's reasons and route, gemm_avx512.hpp).
inline bool done_before_packing(const math::GemmArgs<float>& g, void (*kernel)(const math::GemmArgs<float>&)) {
  add_a_row_sums(g);
  if (g.m == 0 || g.n == 0) return true;
  if (g.k == 0 || g.alpha == 0.0f) {
    scale_by_beta(g);
    apply_epilogue(g);
    return true;
  }
  if (g.n > g.m && g.trans_b) {
    thread_local std::vector<float> flipped;
    flipped.resize(static_cast<std::size_t>(g.n * g.m));
    kernel({!g.trans_b, !g.trans_a, g.n, g.m, g.k, g.alpha, g.b, g.ldb, g.a, g.lda, 0.0f, flipped.data(), g.m});
    store_transposed(g, flipped.data());
    return true;
  }
  return false;
}

/// gemm_bf16_avx512's work (see the file comment).
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void gemm(const math::GemmArgs<float>& g) {
  if (done_before_packing(g, &gemm)) return;
  static constexpr auto plain = tile_table<false>(std::make_integer_sequence<int, kMR>{});
  static constexpr auto transposed = tile_table<true>(std::make_integer_sequence<int, kMR>{});
  const auto& tiles = g.trans_a ? transposed : plain;
  thread_local std::vector<Pair> b_space, a_space;
  Pair* const b_panels = aligned_to_line(b_space, kKC / 2 * (kNC + kNR));
  Pair* const a_block = aligned_to_line(a_space, kKC / 2 * kMC);
  for (std::int64_t jc = 0; jc < g.n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, g.n - jc);
    for (std::int64_t pc = 0; pc < g.k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, g.k - pc), kq = (kc + 1) / 2;
      pack_b(g, pc, kc, jc, nc, b_panels);
      const bool first = pc == 0, last = pc + kc >= g.k;
      const float beta = first ? g.beta : 1.0f;
      const bool load_c = !first || g.beta != 0.0f;
      for (std::int64_t ic = 0; ic < g.m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, g.m - ic);
        pack_a(g, ic, mc, pc, kc, a_block);
        const std::int64_t a_ld = g.trans_a ? (mc + 15) / 16 * 16 : kq;  // the pairs' stride across q or across i
        for (std::int64_t jr = 0; jr < nc; jr += kNR) {
          __mmask16 m0, m1;
          avx512::column_masks(static_cast<int>(std::min<std::int64_t>(kNR, nc - jr)), m0, m1);
          const Pair* bp = b_panels + jr * kq;
          float* cj = g.c + jc + jr;
          avx512::TileEpilogue e;
          if (last) e = {g.col_bias ? g.col_bias + jc + jr : nullptr, nullptr, g.relu};
          for (std::int64_t ir = 0; ir < mc; ir += kMR) {
            const std::int64_t i = ic + ir;
            const auto rows = static_cast<int>(std::min<std::int64_t>(kMR, mc - ir));
            const Pair* a = g.trans_a ? a_block + ir : a_block + ir * kq;
            if (last && g.row_bias) e.row_bias = g.row_bias + i;
            tiles[static_cast<std::size_t>(rows - 1)](kq, a, a_ld, bp, cj + i * g.ldc, g.ldc, g.alpha, beta, load_c, m0,
                                                      m1, e);
          }
        }
      }
    }
  }
}

}  // namespace avx512_bf16

/// gemm_bf16 with the AVX512-BF16 kernel (see the file comment). Call only where has_avx512_bf16().
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void gemm_bf16_avx512(const math::GemmArgs<float>& g) {
  avx512_bf16::gemm(g);
}
#endif

}  // namespace strata::kernels::cpu

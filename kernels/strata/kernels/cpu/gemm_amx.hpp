/// \file
/// The AMX-BF16 kernel of gemm_bf16 (gemm_bf16.hpp), on Sapphire Rapids and later. C is held
/// in 16 x 16 float tiles; TDPBF16PS adds to one the product of a 16 x 32 bfloat16 tile of A
/// and a 32 x 16 one of B, 8,192 products an instruction (VDPBF16PS: 32). A 32 x 32 block of C
/// is four tiles (tmm0-3), summed over a block's depth from two tiles of A (tmm4, 5) and two of
/// B (tmm6, 7), then stored to a scratch block and from there through the float kernel's tile
/// store: alpha, beta, the epilogue and the edges' masks are the float kernel's.
///
/// The operands are packed as the AVX512-BF16 kernel packs them (gemm_avx512_bf16.hpp), padded
/// with zeros to whole tiles: B's 32-column panels to a multiple of 16 pairs of depth, A's rows
/// to a multiple of 16 and each row's depth to a multiple of 16 pairs. A tile of A is 16 rows of
/// 16 consecutive pairs, so a transposed A (a weight gradient's Gᵀ X) is packed as pairs across
/// its rows, then turned 16 x 16 at a time (transpose_avx512.hpp). The conversions flush
/// subnormal operands to zero, and TDPBF16PS flushes subnormal sums.
#pragma once

#include <algorithm>  // std::min, std::fill_n
#include <cstdint>
#include <vector>

#include <strata/kernels/cpu/gemm_avx512_bf16.hpp>  // the packs, Pair
#include <strata/kernels/cpu/transpose_avx512.hpp>
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

#if defined(STRATA_GEMM_AVX512) && defined(STRATA_TRANSPOSE_AVX512) && defined(__linux__)
#define STRATA_GEMM_AMX 1
namespace amx_bf16 {

using avx512_bf16::Pair;
inline constexpr std::int64_t kTile = 16;              // rows of a tile, and pairs in a row of A's
inline constexpr std::int64_t kNR = avx512_bf16::kNR;  // 32 columns: a panel of B, two tiles
inline constexpr std::int64_t kMR = 32;                // rows of a block of C: two tiles
inline constexpr std::int64_t kKC = 512;               // depth of a block: its B panel, 256 pairs x 32, is 32 KiB
inline constexpr std::int64_t kMC = 8 * kMR;           // rows of A packed and swept over one block of B
inline constexpr std::int64_t kNC = avx512::kNC;       // columns of B packed at once

/// LDTILECFG's operand: palette 1, each tile's rows and bytes a row.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

/// n rounded up to whole tiles.
constexpr std::int64_t whole_tiles(std::int64_t n) { return (n + kTile - 1) / kTile * kTile; }

/// out [16 kRowTiles, 32] = the rows a [16 kRowTiles, kq16 pairs] (row stride sa pairs) times
/// the panel bp [kq16, 32 pairs]; kq16 a multiple of 16.
template <int kRowTiles>
[[gnu::target("amx-tile,amx-bf16")]] inline void block(std::int64_t kq16, const Pair* a, std::int64_t sa,
                                                       const Pair* bp, float* out) {
  const std::int64_t sa_bytes = sa * static_cast<std::int64_t>(sizeof(Pair)), sb_bytes = kNR * sizeof(Pair);
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kRowTiles == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (std::int64_t q = 0; q < kq16; q += kTile) {
    _tile_loadd(6, bp + q * kNR, sb_bytes);
    _tile_loadd(7, bp + q * kNR + 16, sb_bytes);
    _tile_loadd(4, a + q, sa_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kRowTiles == 2) {
      _tile_loadd(5, a + kTile * sa + q, sa_bytes);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr std::int64_t ld_bytes = kNR * sizeof(float);
  _tile_stored(0, out, ld_bytes);
  _tile_stored(1, out + 16, ld_bytes);
  if constexpr (kRowTiles == 2) {
    _tile_stored(2, out + kTile * kNR, ld_bytes);
    _tile_stored(3, out + kTile * kNR + 16, ld_bytes);
  }
}

/// C's `rows` rows (of 32 columns, masked by m0, m1) from a block's sums out [rows, 32]:
/// alpha * out + (load_c ? beta * C : 0), then the epilogue e (its row bias from the block's
/// first row).
[[gnu::target("avx512f")]] inline void store_rows(const float* out, std::int64_t rows, float* c, std::int64_t ldc,
                                                  float alpha, float beta, bool load_c, __mmask16 m0, __mmask16 m1,
                                                  avx512::TileEpilogue e) {
  std::int64_t i = 0;
  for (; i + kTile <= rows; i += kTile) {
    __m512 lo[kTile], hi[kTile];
#pragma GCC unroll 16
    for (int r = 0; r < kTile; ++r) {
      lo[r] = _mm512_load_ps(out + (i + r) * kNR);
      hi[r] = _mm512_load_ps(out + (i + r) * kNR + 16);
    }
    avx512::store_tile<kTile>(lo, hi, c + i * ldc, ldc, alpha, beta, load_c, m0, m1, e);
    if (e.row_bias) e.row_bias += kTile;
  }
  for (; i < rows; ++i) {
    const __m512 lo[1] = {_mm512_load_ps(out + i * kNR)}, hi[1] = {_mm512_load_ps(out + i * kNR + 16)};
    avx512::store_tile<1>(lo, hi, c + i * ldc, ldc, alpha, beta, load_c, m0, m1, e);
    if (e.row_bias) ++e.row_bias;
  }
}

/// gemm_bf16_amx's work (see the file comment).
[[gnu::target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")]] inline void gemm(const math::GemmArgs<float>& g) {
  if (avx512_bf16::done_before_packing(g, &gemm)) return;
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kTile;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
  thread_local std::vector<Pair> b_space, a_space, turn_space;
  Pair* const b_panels = avx512_bf16::aligned_to_line(b_space, kKC / 2 * (kNC + kNR));
  Pair* const a_block = avx512_bf16::aligned_to_line(a_space, kKC / 2 * kMC);
  Pair* const turned = g.trans_a ? avx512_bf16::aligned_to_line(turn_space, kKC / 2 * kMC) : nullptr;
  alignas(64) float out[kMR * kNR];
  for (std::int64_t jc = 0; jc < g.n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, g.n - jc);
    for (std::int64_t pc = 0; pc < g.k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, g.k - pc), kq = (kc + 1) / 2, kq16 = whole_tiles(kq);
      avx512_bf16::pack_b(g, pc, kc, jc, nc, b_panels, kq16);
      const bool first = pc == 0, last = pc + kc >= g.k;
      const float beta = first ? g.beta : 1.0f;
      const bool load_c = !first || g.beta != 0.0f;
      for (std::int64_t ic = 0; ic < g.m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, g.m - ic), mc16 = whole_tiles(mc);
        if (!g.trans_a) {  // rows of pairs in depth order, padded
          avx512_bf16::pack_a(g, ic, mc, pc, kc, a_block, kq16);
          std::fill_n(a_block + mc * kq16, (mc16 - mc) * kq16, Pair{0});
        } else {  // pairs across the rows [kq16][mc16] (zeros past kq and mc), turned into rows
          avx512_bf16::pack_a(g, ic, mc, pc, kc, turned);
          std::fill_n(turned + kq * mc16, (kq16 - kq) * mc16, Pair{0});
          avx512::transpose_into(kq16, mc16, reinterpret_cast<const float*>(turned), mc16,
                                 reinterpret_cast<float*>(a_block));
        }
        for (std::int64_t jr = 0; jr < nc; jr += kNR) {
          __mmask16 m0, m1;
          avx512::column_masks(static_cast<int>(std::min<std::int64_t>(kNR, nc - jr)), m0, m1);
          const Pair* bp = b_panels + jr * kq16;
          float* cj = g.c + jc + jr;
          avx512::TileEpilogue e;
          if (last) e = {g.col_bias ? g.col_bias + jc + jr : nullptr, nullptr, g.relu};
          for (std::int64_t ir = 0; ir < mc; ir += kMR) {
            const std::int64_t i = ic + ir, rows = std::min(kMR, mc - ir);
            const Pair* a = a_block + ir * kq16;
            if (rows > kTile)
              block<2>(kq16, a, kq16, bp, out);
            else
              block<1>(kq16, a, kq16, bp, out);
            if (last && g.row_bias) e.row_bias = g.row_bias + i;
            store_rows(out, rows, cj + i * g.ldc, g.ldc, g.alpha, beta, load_c, m0, m1, e);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace amx_bf16

/// gemm_bf16 with the AMX-BF16 kernel (see the file comment). Call only where has_amx_bf16()
/// and has_avx512_bf16() (its packs).
[[gnu::target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")]] inline void gemm_bf16_amx(
    const math::GemmArgs<float>& g) {
  amx_bf16::gemm(g);
}
#endif

}  // namespace strata::kernels::cpu

/// \file
/// Winograd's minimal filtering F(2x2, 3x3) for 3x3 convolutions at stride 1 (Lavin and Gray,
/// "Fast Algorithms for Convolutional Neural Networks", 2016). Each 2x2 block of output
/// pixels (a tile) is
///
///     Y = Aᵀ [ U ⊙ V ] A,   U = G w Gᵀ (the 3x3 filter), V = Bᵀ d B (the 4x4 input patch d)
///
/// and summed over the input channels the products ⊙ are 16 GEMMs, one per entry ξ of the 4x4
/// transforms: M[ξ] [K, tiles] = U[ξ] [K, C] V[ξ] [C, tiles]. That is 16 multiplications a
/// tile and channel pair where the direct convolution (im2col and one GEMM) does 36, and no
/// column matrix 9x the image to write and read. The transforms are adds and subtractions
/// only (G's halves are exact), so float keeps its accuracy to a few units in the last place
/// of the direct sum's magnitude.
///
/// The input gradient of the same convolution is the convolution of the output gradient with
/// the filter turned by 180° and its channel axes swapped, at padding 2 - p: the same code
/// with the adjoint filter transform (filter_transform's `adjoint`).
///
/// Layout: channels last, so the transforms run along the channels (contiguous, a vector of
/// them a step): U is [16][C][K]; a chunk of `cnt` images has V [16][cnt * tiles][C] and M
/// [16][cnt * tiles][K], a tile's row b * tiles + ty * tw + tx. An image is copied into a
/// bordered channels-last scratch before its input transform, and its output is turned back
/// to NCHW after its output transform, with the bias, the ReLU and the accumulation.
///
/// The 16 GEMMs go through the caller's `product` (kernels::cpu::gemm by default): ops pass
/// the GEMM of the thread's precision policy, so under bfloat16 or float16 the transformed
/// operands U and V (H) are rounded to that type and their products summed in float, as the
/// direct convolution's are. The transforms and Aᵀ M A stay float.
#pragma once

#include <algorithm>  // std::clamp, std::fill_n, std::max
#include <cstdint>
#include <cstdio>       // std::fprintf
#include <cstring>      // std::memcpy
#include <string_view>
#include <type_traits>  // std::is_same_v

#include <strata/config.hpp>  // STRATA_RESTRICT
#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f
#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/math/conv_geometry.hpp>
#include <strata/support/environment.hpp>

namespace strata::kernels::cpu::winograd {

/// A GEMM over float or double operands: the products' implementation the convolution uses.
template <class T>
using Product = void (*)(const math::GemmArgs<T>&);

inline constexpr int kEntries = 16;  // ξ: the entries of a 4x4 transformed tile

/// The tiles of one output plane and the zero-bordered input plane they read.
struct Tiling {
  std::int64_t oh, ow;  // output plane
  std::int64_t th, tw;  // rows and columns of 2x2 tiles (the last row / column may hang over)
  std::int64_t hp, wp;  // the bordered input plane: 2 th + 2 rows of 2 tw + 2
  std::int64_t tiles() const noexcept { return th * tw; }
};

inline Tiling tiling(const math::ConvGeometry& g) noexcept {
  const std::int64_t oh = g.oh(), ow = g.ow(), th = (oh + 1) / 2, tw = (ow + 1) / 2;
  return {oh, ow, th, tw, 2 * th + 2, 2 * tw + 2};
}

/// Whether Winograd convolutions run at all: STRATA_CONV=im2col turns them off (every
/// convolution then goes by im2col and one GEMM), read once; unset or "auto" leaves them on.
inline bool enabled() {
  static const bool on = [] {
    const char* env = environment::get("STRATA_CONV");
    const std::string_view mode = env != nullptr ? env : "auto";
    if (mode != "auto" && mode != "im2col")
      std::fprintf(stderr, "[strata.kernels] STRATA_CONV='%s' is none of auto, im2col: auto\n", env);
    return mode != "im2col";
  }();
  return on;
}

/// Whether a convolution runs this way (when enabled()): 3x3 at stride 1 with a padding of at
/// most 2 (so the input gradient's padding 2 - p is one too), and at least 16 channels in and
/// out, the depth of the GEMMs both ways (fewer, and the transforms cost more than the
/// products they save).
inline bool applies(const math::ConvGeometry& g, std::int64_t out_channels) noexcept {
  return g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad <= 2 && g.c >= 16 && out_channels >= 16;
}

/// u = U[ξ][c][k] = (G w[k, c] Gᵀ)[ξ] for w [K, C, 3, 3]: the GEMMs' right operand, [C, K]
/// an entry. `adjoint`: the filter of the input gradient, U[ξ][k][c] of w[k, c] turned by 180°
/// (its input channels are w's outputs). In double, rounded once.
template <class T>
void filter_transform(std::int64_t K, std::int64_t C, const T* STRATA_RESTRICT w, bool adjoint, T* STRATA_RESTRICT u) {
  const std::int64_t entry = K * C;
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t c = 0; c < C; ++c) {
      const T* f = w + (k * C + c) * 9;
      double g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = static_cast<double>(adjoint ? f[(2 - i) * 3 + (2 - j)] : f[i * 3 + j]);
      double gg[4][3];  // G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = g[0][j];
        gg[1][j] = (g[0][j] + g[1][j] + g[2][j]) / 2;
        gg[2][j] = (g[0][j] - g[1][j] + g[2][j]) / 2;
        gg[3][j] = g[2][j];
      }
      T* dst = u + (adjoint ? k * C + c : c * K + k);
      for (int i = 0; i < 4; ++i) {  // (G g) Gᵀ, the same combinations along the rows
        const double r[4] = {gg[i][0], (gg[i][0] + gg[i][1] + gg[i][2]) / 2, (gg[i][0] - gg[i][1] + gg[i][2]) / 2,
                             gg[i][2]};
        for (int j = 0; j < 4; ++j) dst[(4 * i + j) * entry] = static_cast<T>(r[j]);
      }
    }
}

namespace detail {

/// A vector of kBytes / sizeof(T) lanes (GCC's and Clang's vector extensions: SSE on the
/// baseline x86-64, AVX-512 inside the functions compiled for it), or T itself (one lane) for
/// the channels left over. Moved through memory by reference, never passed by value.
template <class T, int kBytes>
struct Lanes {
  using V [[gnu::vector_size(kBytes)]] = T;
  static constexpr std::int64_t n = kBytes / static_cast<std::int64_t>(sizeof(T));
};
template <class V, class T>
[[gnu::always_inline]] inline void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof v);
}
template <class V, class T>
[[gnu::always_inline]] inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

/// d[j * ds + i] = s[i * ss + j] for a 4x4 block: four vector loads, eight shuffles, four stores.
template <class T>
[[gnu::always_inline]] inline void transpose4(const T* s, std::int64_t ss, T* d, std::int64_t ds) {
  using V = typename Lanes<T, 4 * static_cast<int>(sizeof(T))>::V;
  V r0, r1, r2, r3;
  load(r0, s);
  load(r1, s + ss);
  load(r2, s + 2 * ss);
  load(r3, s + 3 * ss);
  const V t0 = __builtin_shufflevector(r0, r1, 0, 4, 1, 5), t1 = __builtin_shufflevector(r0, r1, 2, 6, 3, 7);
  const V t2 = __builtin_shufflevector(r2, r3, 0, 4, 1, 5), t3 = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);
  const V c0 = __builtin_shufflevector(t0, t2, 0, 1, 4, 5), c1 = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  const V c2 = __builtin_shufflevector(t1, t3, 0, 1, 4, 5), c3 = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
  store(d, c0);
  store(d + ds, c1);
  store(d + 2 * ds, c2);
  store(d + 3 * ds, c3);
}

/// d[j * ds + i] = s[i * ss + j] for i < rows, j < cols: 4x4 blocks, the edges one by one.
template <class T>
[[gnu::always_inline]] inline void transpose_block(std::int64_t rows, std::int64_t cols, const T* s, std::int64_t ss, T* d,
                                             std::int64_t ds) {
  const std::int64_t r4 = rows / 4 * 4, c4 = cols / 4 * 4;
  for (std::int64_t i = 0; i < r4; i += 4) {
    for (std::int64_t j = 0; j < c4; j += 4) transpose4(s + i * ss + j, ss, d + j * ds + i, ds);
    for (std::int64_t j = c4; j < cols; ++j)
      for (std::int64_t k = i; k < i + 4; ++k) d[j * ds + k] = s[k * ss + j];
  }
  for (std::int64_t i = r4; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) d[j * ds + i] = s[i * ss + j];
}

/// One image x [C, h, w] as the tiles read it: d [hp, wp, C], channels last (the transforms
/// then run along the channels, contiguous), with `pad` zeros on the top and left and as many
/// as the tiles need on the bottom and right.
template <class T>
[[gnu::always_inline]] inline void bordered_channels_last(const Tiling t, std::int64_t C, std::int64_t h,
                                                          std::int64_t w, std::int64_t pad, const T* STRATA_RESTRICT x,
                                                          T* STRATA_RESTRICT d) {
  std::fill_n(d, t.hp * t.wp * C, T(0));
  const std::int64_t rows = std::min(h, t.hp - pad), cols = std::min(w, t.wp - pad);
  for (std::int64_t y = 0; y < rows; ++y)  // row y of every plane, [C, cols], turned into [cols, C]
    transpose_block(C, cols, x + y * w, h * w, d + ((pad + y) * t.wp + pad) * C, C);
}

/// (Bᵀ d B)[ξ] for V's lanes of consecutive channels: d(i, j) at at[i * row + j * C], ξ's
/// value to o[ξ * entry].
template <class V, class T>
[[gnu::always_inline]] inline void input_lanes(const T* at, std::int64_t row, std::int64_t C, T* o, std::int64_t entry) {
  V q[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) load(q[i][j], at + i * row + j * C);
  V e[4][4];  // Bᵀ d: rows 0 - 2, 1 + 2, 2 - 1, 1 - 3
  for (int j = 0; j < 4; ++j) {
    e[0][j] = q[0][j] - q[2][j];
    e[1][j] = q[1][j] + q[2][j];
    e[2][j] = q[2][j] - q[1][j];
    e[3][j] = q[1][j] - q[3][j];
  }
  for (int i = 0; i < 4; ++i) {  // (Bᵀ d) B: the same along the columns
    const V r0 = e[i][0] - e[i][2], r1 = e[i][1] + e[i][2], r2 = e[i][2] - e[i][1], r3 = e[i][1] - e[i][3];
    store(o + (4 * i + 0) * entry, r0);
    store(o + (4 * i + 1) * entry, r1);
    store(o + (4 * i + 2) * entry, r2);
    store(o + (4 * i + 3) * entry, r3);
  }
}

/// V[ξ][t][c] = (Bᵀ d B)[ξ] for the tiles t of one image's d [hp, wp, C]; V[ξ] `entry` apart.
template <class T, int kBytes>
[[gnu::always_inline]] inline void input_transform(const Tiling t, std::int64_t C, const T* d, T* v, std::int64_t entry) {
  using L = Lanes<T, kBytes>;
  const std::int64_t row = t.wp * C;
  for (std::int64_t ty = 0; ty < t.th; ++ty)
    for (std::int64_t tx = 0; tx < t.tw; ++tx) {
      const T* corner = d + (2 * ty * t.wp + 2 * tx) * C;
      T* o = v + (ty * t.tw + tx) * C;
      std::int64_t c = 0;
      for (; c + L::n <= C; c += L::n) input_lanes<typename L::V>(corner + c, row, C, o + c, entry);
      for (; c < C; ++c) input_lanes<T>(corner + c, row, C, o + c, entry);
    }
}

/// (Aᵀ M A) for V's lanes of consecutive channels, M(i, j) at m[(4 i + j) * entry], to the
/// tile's four pixels; a hanging pixel's pointer is its neighbour's, which is stored after it.
template <class V, class T>
[[gnu::always_inline]] inline void output_lanes(const T* m, std::int64_t entry, T* o00, T* o01, T* o10, T* o11) {
  V q[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) load(q[i][j], m + (4 * i + j) * entry);
  V s0[4], s1[4];  // Aᵀ M: rows 0 + 1 + 2 and 1 - 2 - 3
  for (int j = 0; j < 4; ++j) {
    s0[j] = q[0][j] + q[1][j] + q[2][j];
    s1[j] = q[1][j] - q[2][j] - q[3][j];
  }
  const V y11 = s1[1] - s1[2] - s1[3], y10 = s1[0] + s1[1] + s1[2];
  const V y01 = s0[1] - s0[2] - s0[3], y00 = s0[0] + s0[1] + s0[2];
  store(o11, y11);
  store(o10, y10);
  store(o01, y01);
  store(o00, y00);
}

/// One image's output y [K, oh, ow] (+)= act(Aᵀ M A + bias) of its tiles' M[ξ][t][k] (M[ξ]
/// `entry` apart), by way of o [oh, ow, K], channels last, turned round with the epilogue.
template <class T, int kBytes>
[[gnu::always_inline]] inline void output_transform(const Tiling t, std::int64_t K, const T* m, std::int64_t entry,
                                                    const T* bias, bool relu, bool accumulate, T* o, T* y) {
  using L = Lanes<T, kBytes>;
  for (std::int64_t ty = 0; ty < t.th; ++ty)
    for (std::int64_t tx = 0; tx < t.tw; ++tx) {
      const T* mt = m + (ty * t.tw + tx) * K;
      const bool down = 2 * ty + 1 < t.oh, right = 2 * tx + 1 < t.ow;  // (the last tiles may hang over)
      T* o00 = o + (2 * ty * t.ow + 2 * tx) * K;
      T* o01 = o00 + (right ? K : 0);
      T* o10 = o00 + (down ? t.ow * K : 0);
      T* o11 = o10 + (right ? K : 0);
      std::int64_t k = 0;
      for (; k + L::n <= K; k += L::n) output_lanes<typename L::V>(mt + k, entry, o00 + k, o01 + k, o10 + k, o11 + k);
      for (; k < K; ++k) output_lanes<T>(mt + k, entry, o00 + k, o01 + k, o10 + k, o11 + k);
    }
  const std::int64_t P = t.oh * t.ow;
  if (bias == nullptr && !relu && !accumulate) return transpose_block(P, K, o, K, y, P);  // (a plain convolution's)
  for (std::int64_t k = 0; k < K; ++k) {
    const T b = bias != nullptr ? bias[k] : T(0);
    T* STRATA_RESTRICT dst = y + k * P;
    const T* STRATA_RESTRICT src = o + k;
    for (std::int64_t q = 0; q < P; ++q) {
      T val = src[q * K] + b;
      if (relu) val = val > T(0) ? val : T(0);
      dst[q] = accumulate ? dst[q] + val : val;
    }
  }
}

/// (A q Aᵀ)[ξ] for V's lanes of consecutive channels of an output gradient's 2x2 tile, q(a, b)
/// at at[a * row + b * K], ξ's value to o[ξ * entry]. A = [1 0; 1 1; 1 -1; 0 -1].
template <class V, class T>
[[gnu::always_inline]] inline void grad_lanes(const T* at, std::int64_t row, std::int64_t K, T* o, std::int64_t entry) {
  V q[2][2];
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) load(q[a][b], at + a * row + b * K);
  V e[4][2];  // A q: rows 0, 0 + 1, 0 - 1, -1
  for (int b = 0; b < 2; ++b) {
    e[0][b] = q[0][b];
    e[1][b] = q[0][b] + q[1][b];
    e[2][b] = q[0][b] - q[1][b];
    e[3][b] = -q[1][b];
  }
  for (int i = 0; i < 4; ++i) {  // (A q) Aᵀ: the same along the columns
    const V r0 = e[i][0], r1 = e[i][0] + e[i][1], r2 = e[i][0] - e[i][1], r3 = -e[i][1];
    store(o + (4 * i + 0) * entry, r0);
    store(o + (4 * i + 1) * entry, r1);
    store(o + (4 * i + 2) * entry, r2);
    store(o + (4 * i + 3) * entry, r3);
  }
}

/// H[ξ][t][k] = (A gy Aᵀ)[ξ] for the tiles t of one image's output gradient e [2 th, 2 tw, K]
/// (channels last, zeros where a tile hangs over); H[ξ] `entry` apart.
template <class T, int kBytes>
[[gnu::always_inline]] inline void grad_transform(const Tiling t, std::int64_t K, const T* e, T* h, std::int64_t entry) {
  using L = Lanes<T, kBytes>;
  const std::int64_t row = 2 * t.tw * K;
  for (std::int64_t ty = 0; ty < t.th; ++ty)
    for (std::int64_t tx = 0; tx < t.tw; ++tx) {
      const T* corner = e + (2 * ty * 2 * t.tw + 2 * tx) * K;
      T* o = h + (ty * t.tw + tx) * K;
      std::int64_t k = 0;
      for (; k + L::n <= K; k += L::n) grad_lanes<typename L::V>(corner + k, row, K, o + k, entry);
      for (; k < K; ++k) grad_lanes<T>(corner + k, row, K, o + k, entry);
    }
}

/// dw [K, C, 3, 3] (+)= Gᵀ M[·][c][k] G for M [16][C][K], in double, rounded once.
/// Gᵀ = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1].
template <class T>
void filter_gradient_transform(std::int64_t K, std::int64_t C, const T* STRATA_RESTRICT m, bool accumulate,
                               T* STRATA_RESTRICT dw) {
  const std::int64_t entry = C * K;
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t c = 0; c < C; ++c) {
      double q[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) q[i][j] = static_cast<double>(m[(4 * i + j) * entry + c * K + k]);
      double r[3][4];  // Gᵀ M
      for (int j = 0; j < 4; ++j) {
        r[0][j] = q[0][j] + (q[1][j] + q[2][j]) / 2;
        r[1][j] = (q[1][j] - q[2][j]) / 2;
        r[2][j] = (q[1][j] + q[2][j]) / 2 + q[3][j];
      }
      T* out = dw + (k * C + c) * 9;
      for (int i = 0; i < 3; ++i) {  // (Gᵀ M) G
        const double v[3] = {r[i][0] + (r[i][1] + r[i][2]) / 2, (r[i][1] - r[i][2]) / 2, (r[i][1] + r[i][2]) / 2 + r[i][3]};
        for (int j = 0; j < 3; ++j) out[i * 3 + j] = static_cast<T>(v[j] + (accumulate ? static_cast<double>(out[i * 3 + j]) : 0.0));
      }
    }
}

}  // namespace detail

/// How many images one chunk holds: V and M within 1 MiB (in L2 between the transforms and
/// the GEMMs).
inline std::int64_t chunk_images(const Tiling t, std::int64_t n, std::int64_t in_channels, std::int64_t out_channels,
                                 std::size_t elem_size) {
  const std::int64_t per_image = kEntries * (in_channels + out_channels) * t.tiles() * static_cast<std::int64_t>(elem_size);
  return std::clamp<std::int64_t>((std::int64_t{1} << 20) / std::max<std::int64_t>(per_image, 1), 1, std::max<std::int64_t>(n, 1));
}

/// Scratch elements convolve() needs for geometry g (input channels g.c) and K outputs.
inline std::int64_t workspace_elements(const math::ConvGeometry& g, std::int64_t K, std::size_t elem_size) {
  const Tiling t = tiling(g);
  const std::int64_t nb = chunk_images(t, g.n, g.c, K, elem_size), cols = nb * t.tiles();
  return kEntries * (g.c + K) * cols + g.c * t.hp * t.wp + t.oh * t.ow * K;
}

/// Scratch elements filter_gradient() needs for geometry g and K outputs.
inline std::int64_t filter_gradient_workspace(const math::ConvGeometry& g, std::int64_t K, std::size_t elem_size) {
  const Tiling t = tiling(g);
  const std::int64_t nb = chunk_images(t, g.n, g.c, K, elem_size), cols = nb * t.tiles();
  return kEntries * (g.c + K) * cols + kEntries * g.c * K + std::max(g.c * t.hp * t.wp, 4 * t.tiles() * K);
}

namespace detail {

template <class T, int kBytes>
[[gnu::always_inline]] inline void convolve(const math::ConvGeometry& g, std::int64_t K, const T* x, const T* u,
                                            const T* bias, bool relu, bool accumulate, T* y, T* ws,
                                            Product<T> product) {
  const Tiling t = tiling(g);
  const std::int64_t C = g.c, T1 = t.tiles(), nb = chunk_images(t, g.n, C, K, sizeof(T));
  const std::int64_t image = C * g.h * g.w, out_image = K * t.oh * t.ow;
  T* v = ws;
  T* m = v + kEntries * C * nb * T1;
  T* d = m + kEntries * K * nb * T1;
  T* o = d + C * t.hp * t.wp;
  for (std::int64_t i0 = 0; i0 < g.n; i0 += nb) {
    const std::int64_t cnt = std::min(nb, g.n - i0), cols = cnt * T1;
    for (std::int64_t b = 0; b < cnt; ++b) {
      bordered_channels_last(t, C, g.h, g.w, g.pad, x + (i0 + b) * image, d);
      input_transform<T, kBytes>(t, C, d, v + b * T1 * C, cols * C);
    }
    for (int xi = 0; xi < kEntries; ++xi) {  // M[ξ] [cols, K] = V[ξ] [cols, C] U[ξ] [C, K]
      product(GemmArgs<T>{false, false, cols, K, C, T(1), v + xi * cols * C, C, u + xi * C * K, K, T(0),
                          m + xi * cols * K, K});
    }
    for (std::int64_t b = 0; b < cnt; ++b)
      output_transform<T, kBytes>(t, K, m + b * T1 * K, cols * K, bias, relu, accumulate, o, y + (i0 + b) * out_image);
  }
}

/// dw [K, C, 3, 3] (+)= the weight gradient of the convolution of x [N, C, H, W] (geometry g)
/// whose output gradient is gy [N, K, OH, OW]: M[ξ] [C, K] = Σ over the chunks' tiles of
/// V[ξ]ᵀ H[ξ] (input and output-gradient transforms), then Gᵀ M G.
template <class T, int kBytes>
[[gnu::always_inline]] inline void filter_gradient(const math::ConvGeometry& g, std::int64_t K, const T* x,
                                                   const T* gy, bool accumulate, T* dw, T* ws, Product<T> product) {
  const Tiling t = tiling(g);
  const Tiling tg{t.oh, t.ow, t.th, t.tw, 2 * t.th, 2 * t.tw};  // the output gradient, hanging pixels 0
  const std::int64_t C = g.c, T1 = t.tiles(), nb = chunk_images(t, g.n, C, K, sizeof(T));
  const std::int64_t image = C * g.h * g.w, out_image = K * t.oh * t.ow;
  T* v = ws;
  T* h = v + kEntries * C * nb * T1;
  T* m = h + kEntries * K * nb * T1;
  T* d = m + kEntries * C * K;
  for (std::int64_t i0 = 0; i0 < g.n; i0 += nb) {
    const std::int64_t cnt = std::min(nb, g.n - i0), cols = cnt * T1;
    for (std::int64_t b = 0; b < cnt; ++b) {
      bordered_channels_last(t, C, g.h, g.w, g.pad, x + (i0 + b) * image, d);
      input_transform<T, kBytes>(t, C, d, v + b * T1 * C, cols * C);
      bordered_channels_last(tg, K, t.oh, t.ow, 0, gy + (i0 + b) * out_image, d);
      grad_transform<T, kBytes>(t, K, d, h + b * T1 * K, cols * K);
    }
    for (int xi = 0; xi < kEntries; ++xi) {  // M[ξ] [C, K] (+)= V[ξ]ᵀ [C, cols] H[ξ] [cols, K]
      product(GemmArgs<T>{true, false, C, K, cols, T(1), v + xi * cols * C, C, h + xi * cols * K, K,
                          T(i0 > 0 ? 1 : 0), m + xi * C * K, K});
    }
  }
  filter_gradient_transform(K, C, m, accumulate, dw);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
/// The same compiled for AVX-512: the transforms' channel loops then take 16 floats a step.
[[gnu::target("avx512f")]] inline void convolve_avx512(const math::ConvGeometry& g, std::int64_t K, const float* x,
                                                       const float* u, const float* bias, bool relu, bool accumulate,
                                                       float* y, float* ws, Product<float> product) {
  convolve<float, 64>(g, K, x, u, bias, relu, accumulate, y, ws, product);
}
[[gnu::target("avx512f")]] inline void filter_gradient_avx512(const math::ConvGeometry& g, std::int64_t K,
                                                              const float* x, const float* gy, bool accumulate,
                                                              float* dw, float* ws, Product<float> product) {
  filter_gradient<float, 64>(g, K, x, gy, accumulate, dw, ws, product);
}
#define STRATA_WINOGRAD_AVX512 1
#endif

}  // namespace detail

/// y [N, K, OH, OW] (+)= act(conv(x [N, C, H, W], w) + bias) at stride 1 and padding g.pad,
/// where u is w's filter_transform ([16][C][K]); `ws` holds workspace_elements(g, K). bias
/// may be null; `product` runs the 16 GEMMs.
template <class T>
void convolve(const math::ConvGeometry& g, std::int64_t K, const T* x, const T* u, const T* bias, bool relu,
              bool accumulate, T* y, T* ws, Product<T> product = &gemm<T>) {
#ifdef STRATA_WINOGRAD_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) return detail::convolve_avx512(g, K, x, u, bias, relu, accumulate, y, ws, product);
#endif
  detail::convolve<T, 16>(g, K, x, u, bias, relu, accumulate, y, ws, product);
}

/// dw [K, C, 3, 3] (+)= the weight gradient of the convolution of x [N, C, H, W] at stride 1
/// and padding g.pad whose output gradient is gy [N, K, OH, OW]; `ws` holds
/// filter_gradient_workspace(g, K); `product` runs the 16 GEMMs.
template <class T>
void filter_gradient(const math::ConvGeometry& g, std::int64_t K, const T* x, const T* gy, bool accumulate, T* dw,
                     T* ws, Product<T> product = &gemm<T>) {
#ifdef STRATA_WINOGRAD_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) return detail::filter_gradient_avx512(g, K, x, gy, accumulate, dw, ws, product);
#endif
  detail::filter_gradient<T, 16>(g, K, x, gy, accumulate, dw, ws, product);
}

}  // namespace strata::kernels::cpu::winograd

/// \file
/// im2col / col2im for 2-D convolution over NCHW tensors. The column matrix has one row per
/// (channel, kh, kw) and one column per (image, oh, ow), so a batch is one GEMM.
///
/// float planes on a CPU with AVX-512 go by permutes (kernels/cpu/im2col_avx512.hpp). The row
/// kernels here take every other case: with padding, both go through a zero-bordered copy of
/// the images (`padded`, of padded_elements(g)): every window then lies inside it, and each
/// output row is one copy without bounds checks (a strided gather at strides above 1).
/// Measured on the ResNet's 3x3 convolutions (rows of 4 to 14 pixels), this runs im2col 2-3x
/// and col2im 1.5-2x faster than clipping every row against the image's edges.
#pragma once

#include <algorithm>  // std::fill_n, std::max, std::min
#include <cstdint>
#include <cstring>  // std::memcpy
#include <type_traits>  // std::integral_constant, std::is_same_v

#include <strata/config.hpp>              // STRATA_RESTRICT
#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f
#include <strata/kernels/cpu/elementwise.hpp>  // copy_or_add
#include <strata/kernels/cpu/im2col_avx512.hpp>
#include <strata/kernels/math/conv_geometry.hpp>

namespace strata::kernels::cpu {

using math::ConvGeometry;  // kernels/math/conv_geometry.hpp

/// Elements of the zero-bordered image copy that im2col and col2im need (0 without padding).
inline std::int64_t padded_elements(const ConvGeometry& g) noexcept {
  return g.pad == 0 ? 0 : g.n * g.c * (g.h + 2 * g.pad) * (g.w + 2 * g.pad);
}

namespace detail {

/// The images as the windows read them: x itself, or its copy into `padded` with a zero border.
template <class T>
const T* padded_images(const ConvGeometry& g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT padded) {
  if (g.pad == 0) return x;
  const std::int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad;
  for (std::int64_t plane = 0; plane < g.n * g.c; ++plane) {
    T* out = padded + plane * hp * wp;
    const T* in = x + plane * g.h * g.w;
    std::fill_n(out, g.pad * wp + g.pad, T(0));
    out += g.pad * wp + g.pad;
    for (std::int64_t y = 0; y < g.h; ++y, out += wp, in += g.w) {
      for (std::int64_t k = 0; k < g.w; ++k) out[k] = in[k];
      if (y + 1 < g.h)
        for (std::int64_t k = g.w; k < wp; ++k) out[k] = T(0);  // this row's right edge, the next one's left
    }
    std::fill_n(out - wp + g.w, g.pad + g.pad * wp, T(0));
  }
  return padded;
}

/// OH rows of a fixed width W (known to the compiler: a few vector moves, no call).
template <int W, class T, class F>
bool rows_of(std::int64_t ow, std::int64_t oh, F&& f) {
  if (ow != W) return false;
  for (std::int64_t y = 0; y < oh; ++y) f(y, std::integral_constant<int, W>{});
  return true;
}

/// f(y, w) for the OH rows of OW pixels, OW a constant for the widths of a ResNet on 28x28 or
/// 32x32 images (rows this short cost a call each to memmove otherwise).
template <class T, class F>
void for_rows(std::int64_t oh, std::int64_t ow, F&& f) {
  if (rows_of<4, T>(ow, oh, f) || rows_of<7, T>(ow, oh, f) || rows_of<8, T>(ow, oh, f) || rows_of<14, T>(ow, oh, f) ||
      rows_of<16, T>(ow, oh, f) || rows_of<28, T>(ow, oh, f) || rows_of<32, T>(ow, oh, f))
    return;
  for (std::int64_t y = 0; y < oh; ++y) f(y, ow);
}

/// out[y, x] = src[y * s * row, x * s] for the OH x OW window origins of one kernel tap.
template <class T, int S>
void gather_plane(std::int64_t oh, std::int64_t ow, std::int64_t stride, std::int64_t row,
                  const T* STRATA_RESTRICT src, T* STRATA_RESTRICT out) {
  const std::int64_t s = S > 0 ? S : stride;
  if constexpr (S != 1) {  // strided gathers: a runtime width measured as fast as a constant one
    for (std::int64_t y = 0; y < oh; ++y, out += ow, src += s * row)
      for (std::int64_t x = 0; x < ow; ++x) out[x] = src[x * s];
    return;
  }
  for_rows<T>(oh, ow, [&](std::int64_t y, auto w) {
    const T* STRATA_RESTRICT in = src + y * s * row;
    T* STRATA_RESTRICT o = out + y * ow;
    if constexpr (S == 1)
      std::memcpy(o, in, static_cast<std::size_t>(w) * sizeof(T));  // inline moves at a constant width
    else
      for (std::int64_t x = 0; x < static_cast<std::int64_t>(w); ++x) o[x] = in[x * s];
  });
}

/// The adjoint at strides above 1: dst[y * s * row, x * s] += in[y, x].
template <class T, int S>
void scatter_plane(std::int64_t oh, std::int64_t ow, std::int64_t stride, std::int64_t row,
                   const T* STRATA_RESTRICT in, T* STRATA_RESTRICT dst) {
  const std::int64_t s = S > 0 ? S : stride;
  for (std::int64_t y = 0; y < oh; ++y, in += ow, dst += s * row)
    for (std::int64_t x = 0; x < ow; ++x) dst[x * s] += in[x];
}

template <class T, int S>
void im2col_from(const ConvGeometry& g, const T* STRATA_RESTRICT xp, T* STRATA_RESTRICT cols) {
  const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols();
  const std::int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * ncols;
        const T* tap = xp + c * hp * wp + i * wp + j;
        for (std::int64_t n = 0; n < g.n; ++n)
          gather_plane<T, S>(OH, OW, g.stride, wp, tap + n * g.c * hp * wp, row + n * OH * OW);
      }
}

template <class T, int S>
void col2im_into(const ConvGeometry& g, const T* STRATA_RESTRICT cols, T* STRATA_RESTRICT dxp) {
  const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols();
  const std::int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * ncols;
        T* tap = dxp + c * hp * wp + i * wp + j;
        for (std::int64_t n = 0; n < g.n; ++n)
          scatter_plane<T, S>(OH, OW, g.stride, wp, row + n * OH * OW, tap + n * g.c * hp * wp);
      }
}

/// im2col row by row of the output planes (any geometry, any T).
template <class T>
void im2col_by_rows(const ConvGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT cols, T* STRATA_RESTRICT padded) {
  if (g.stride == 1 && g.pad == 0) {  // every window inside the image: plain row copies
    const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          T* out = cols + ((c * g.kh + i) * g.kw + j) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n) {
            const T* src = x + ((n * g.c + c) * g.h + i) * g.w + j;
            for (std::int64_t y = 0; y < OH; ++y, out += OW, src += g.w) copy_or_add(OW, src, out, false);
          }
        }
    return;
  }
  const T* xp = detail::padded_images(g, x, padded);
  if (g.stride == 1)
    detail::im2col_from<T, 1>(g, xp, cols);
  else if (g.stride == 2)
    detail::im2col_from<T, 2>(g, xp, cols);
  else
    detail::im2col_from<T, 0>(g, xp, cols);
}

/// col2im row by row of the output planes (any geometry, any T).
template <class T>
void col2im_by_rows(const ConvGeometry g, const T* STRATA_RESTRICT cols, T* STRATA_RESTRICT dx, bool accumulate,
                    T* STRATA_RESTRICT padded) {
  const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols(), image = g.n * g.c * g.h * g.w;
  if (g.stride == 1) {  // each output row adds one contiguous run of an input row: clip it, no copy
    if (!accumulate) std::fill_n(dx, image, T(0));
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const T* row = cols + ((c * g.kh + i) * g.kw + j) * ncols;
          const std::int64_t x0 = std::max<std::int64_t>(0, g.pad - j);
          const std::int64_t x1 = std::min<std::int64_t>(OW, g.w + g.pad - j);
          for (std::int64_t n = 0; n < g.n; ++n) {
            T* img = dx + (n * g.c + c) * g.h * g.w;
            for (std::int64_t y = 0; y < OH; ++y) {
              const std::int64_t iy = y - g.pad + i;
              if (iy < 0 || iy >= g.h) continue;
              const T* STRATA_RESTRICT in = row + (n * OH + y) * OW;
              T* STRATA_RESTRICT d = img + iy * g.w - g.pad + j;
              for (std::int64_t ox = x0; ox < x1; ++ox) d[ox] += in[ox];
            }
          }
        }
    return;
  }
  T* dxp = g.pad == 0 ? dx : padded;
  if (g.pad != 0 || !accumulate) std::fill_n(dxp, g.pad == 0 ? image : padded_elements(g), T(0));
  if (g.stride == 2)
    detail::col2im_into<T, 2>(g, cols, dxp);
  else
    detail::col2im_into<T, 0>(g, cols, dxp);
  if (g.pad == 0) return;
  const std::int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad;
  for (std::int64_t plane = 0; plane < g.n * g.c; ++plane) {  // the interior back into dx
    const T* STRATA_RESTRICT in = dxp + plane * hp * wp + g.pad * wp + g.pad;
    T* STRATA_RESTRICT out = dx + plane * g.h * g.w;
    for (std::int64_t y = 0; y < g.h; ++y, in += wp, out += g.w) copy_or_add(g.w, in, out, accumulate);
  }
}

}  // namespace detail

/// cols[(c,i,j), (n,y,x)] = x[n, c, y*s - p + i, x*s - p + j] (0 outside the image).
/// `padded` holds padded_elements(g) (may be null without padding; the permutes leave it
/// unread). float planes of up to im2col_avx512::kMaxPlane pixels on a CPU with AVX-512: by
/// permutes (kernels/cpu/im2col_avx512.hpp), the same values.
template <class T>
void im2col(const ConvGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT cols, T* STRATA_RESTRICT padded) {
#ifdef STRATA_IM2COL_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f())
      if (const auto& plan = im2col_avx512::plan_for(g); plan.usable) return im2col_avx512::im2col(g, plan, x, cols);
#endif
  detail::im2col_by_rows(g, x, cols, padded);
}

/// The adjoint of im2col: dx[n, c, y, x] = sum of the column entries that read it, in tap
/// order. Overwrites dx unless `accumulate`. `padded` holds padded_elements(g) (read at
/// strides above 1 by the row kernels only). float on a CPU with AVX-512: by permutes, as im2col.
template <class T>
void col2im(const ConvGeometry g, const T* STRATA_RESTRICT cols, T* STRATA_RESTRICT dx, bool accumulate,
            T* STRATA_RESTRICT padded) {
#ifdef STRATA_IM2COL_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f())
      if (const auto& plan = im2col_avx512::plan_for(g); plan.usable)
        return im2col_avx512::col2im(g, plan, cols, dx, accumulate);
#endif
  detail::col2im_by_rows(g, cols, dx, accumulate, padded);
}

}  // namespace strata::kernels::cpu

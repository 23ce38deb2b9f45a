/// \file
/// im2col / col2im for 2-D convolution over NCHW tensors. The column matrix has one row per
/// (channel, kh, kw) and one column per (image, oh, ow), so a whole batch is one GEMM.
#pragma once

#include <algorithm>  // std::fill_n
#include <cstdint>
#include <utility>  // std::pair

#include <strata/config.hpp>              // STRATA_RESTRICT
#include <strata/kernels/cpu/elementwise.hpp>  // copy_or_add
#include <strata/kernels/math/conv_geometry.hpp>

namespace strata::kernels::cpu {

using math::ConvGeometry;  // kernels/math/conv_geometry.hpp

/// The output columns [x0, x1) of kernel column j whose input column ox*s - p + j lies inside
/// the image (x1 <= x0 when none does).
inline std::pair<std::int64_t, std::int64_t> inside(const ConvGeometry& g, std::int64_t j, std::int64_t ow) {
  const std::int64_t lo = g.pad - j;                 // ox * s >= lo
  const std::int64_t hi = g.w + g.pad - j;           // ox * s < hi
  const std::int64_t x0 = lo <= 0 ? 0 : (lo + g.stride - 1) / g.stride;
  const std::int64_t x1 = hi <= 0 ? 0 : std::min<std::int64_t>(ow, (hi + g.stride - 1) / g.stride);
  return {x0, x1};
}

/// cols[(c,i,j), (n,y,x)] = x[n, c, y*s - p + i, x*s - p + j] (0 outside the image).
template <class T>
void im2col(const ConvGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT cols) {
  const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols();
  if (g.stride == 1 && g.pad == 0) {  // every window inside the image: plain row copies
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          T* out = cols + ((c * g.kh + i) * g.kw + j) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n) {
            const T* src = x + ((n * g.c + c) * g.h + i) * g.w + j;
            // Constant-length blocks: a plain loop of unknown length becomes one memmove call
            // per (often 8-element) row, several times slower.
            for (std::int64_t y = 0; y < OH; ++y, out += OW, src += g.w) copy_or_add(OW, src, out, false);
          }
        }
    return;
  }
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * ncols;
        for (std::int64_t n = 0; n < g.n; ++n) {
          const T* img = x + (n * g.c + c) * g.h * g.w;
          for (std::int64_t y = 0; y < OH; ++y) {
            T* out = row + (n * OH + y) * OW;
            const std::int64_t iy = y * g.stride - g.pad + i;
            if (iy < 0 || iy >= g.h) {
              std::fill_n(out, OW, T(0));
              continue;
            }
            const T* src = img + iy * g.w;
            if (g.stride == 1) {
              // Columns whose input x falls inside the row form one contiguous run.
              const std::int64_t x0 = std::max<std::int64_t>(0, g.pad - j);
              const std::int64_t x1 = std::min<std::int64_t>(OW, g.w + g.pad - j);
              for (std::int64_t ox = 0; ox < x0 && ox < OW; ++ox) out[ox] = T(0);
              for (std::int64_t ox = x0; ox < x1; ++ox) out[ox] = src[ox - g.pad + j];
              for (std::int64_t ox = std::max(x1, x0); ox < OW; ++ox) out[ox] = T(0);
            } else {  // the columns inside the row, found once, then a loop without bounds checks
              const auto [x0, x1] = inside(g, j, OW);
              for (std::int64_t ox = 0; ox < std::min(x0, OW); ++ox) out[ox] = T(0);
              const T* s = src + x0 * g.stride - g.pad + j;
              for (std::int64_t ox = x0; ox < x1; ++ox, s += g.stride) out[ox] = *s;
              for (std::int64_t ox = std::max(x0, x1); ox < OW; ++ox) out[ox] = T(0);
            }
          }
        }
      }
}

/// The adjoint of im2col: dx[n, c, y, x] = sum of the column entries that read it. Overwrites dx
/// unless `accumulate`.
template <class T>
void col2im(const ConvGeometry g, const T* STRATA_RESTRICT cols, T* STRATA_RESTRICT dx, bool accumulate) {
  const std::int64_t OH = g.oh(), OW = g.ow(), ncols = g.cols();
  if (!accumulate) std::fill_n(dx, g.n * g.c * g.h * g.w, T(0));
  if (g.stride == 1 && g.pad == 0) {  // every window inside the image: plain row additions
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const T* STRATA_RESTRICT in = cols + ((c * g.kh + i) * g.kw + j) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n) {
            T* STRATA_RESTRICT dst = dx + ((n * g.c + c) * g.h + i) * g.w + j;
            for (std::int64_t y = 0; y < OH; ++y, in += OW, dst += g.w)
              for (std::int64_t ox = 0; ox < OW; ++ox) dst[ox] += in[ox];
          }
        }
    return;
  }
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * ncols;
        // Output columns whose input x lies inside the row (stride 1: one contiguous run).
        const std::int64_t x0 = std::max<std::int64_t>(0, g.pad - j);
        const std::int64_t x1 = std::min<std::int64_t>(OW, g.w + g.pad - j);
        for (std::int64_t n = 0; n < g.n; ++n) {
          T* img = dx + (n * g.c + c) * g.h * g.w;
          for (std::int64_t y = 0; y < OH; ++y) {
            const std::int64_t iy = y * g.stride - g.pad + i;
            if (iy < 0 || iy >= g.h) continue;
            const T* STRATA_RESTRICT in = row + (n * OH + y) * OW;
            T* STRATA_RESTRICT dst = img + iy * g.w;
            if (g.stride == 1) {
              T* STRATA_RESTRICT d = dst - g.pad + j;
              for (std::int64_t ox = x0; ox < x1; ++ox) d[ox] += in[ox];
            } else {
              const auto [sx0, sx1] = inside(g, j, OW);
              T* d = dst + sx0 * g.stride - g.pad + j;
              for (std::int64_t ox = sx0; ox < sx1; ++ox, d += g.stride) *d += in[ox];
            }
          }
        }
      }
}

}  // namespace strata::kernels::cpu

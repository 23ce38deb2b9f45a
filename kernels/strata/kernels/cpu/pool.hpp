/// \file
/// 2-D pooling over NCHW: max pooling forward (keeping the argmax) and backward (scatter to
/// it); average pooling (the padding counted, PyTorch's default) forward and backward.
#pragma once

#include <algorithm>  // std::fill_n
#include <cstdint>

#include <strata/config.hpp>            // STRATA_RESTRICT
#include <strata/kernels/math/pool.hpp>  // PoolGeometry, max_pool_window

namespace strata::kernels::cpu {

using math::PoolGeometry;

namespace detail {

/// max_pool2d_forward for 2x2 windows at stride 2 without padding (every window inside the
/// image).
template <class T>
void max_pool2x2_forward(const PoolGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT y,
                         std::int32_t* STRATA_RESTRICT argmax) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  for (std::int64_t p = 0; p < g.planes; ++p) {
    const T* in = x + p * g.h * g.w;
    T* out = y + p * OH * OW;
    std::int32_t* arg = argmax + p * OH * OW;
    for (std::int64_t oy = 0; oy < OH; ++oy) {
      const T* STRATA_RESTRICT r0 = in + 2 * oy * g.w;
      const T* STRATA_RESTRICT r1 = r0 + g.w;
      T* STRATA_RESTRICT o = out + oy * OW;
      std::int32_t* STRATA_RESTRICT a = arg + oy * OW;
      const auto b0 = static_cast<std::int32_t>(2 * oy * g.w), b1 = static_cast<std::int32_t>(b0 + g.w);
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        // Selects in window order, no branches, so the loop vectorizes (branches mispredict
        // on ReLU outputs). A NaN candidate wins (max propagates NaN); a NaN best is never
        // replaced by a number.
        const T c0 = r0[2 * ox], c1 = r0[2 * ox + 1], c2 = r1[2 * ox], c3 = r1[2 * ox + 1];
        const auto x0 = static_cast<std::int32_t>(2 * ox);
        T best = c0;
        std::int32_t at = b0 + x0;
        bool t = (c1 > best) | (c1 != c1);
        best = t ? c1 : best;
        at = t ? b0 + x0 + 1 : at;
        t = (c2 > best) | (c2 != c2);
        best = t ? c2 : best;
        at = t ? b1 + x0 : at;
        t = (c3 > best) | (c3 != c3);
        best = t ? c3 : best;
        at = t ? b1 + x0 + 1 : at;
        o[ox] = best;
        a[ox] = at;
      }
    }
  }
}

/// The overwriting max_pool2d_backward for 2x2 windows at stride 2 over planes of even height
/// and width: the windows tile the plane, so each dx element is written once, with the
/// gradient where it won its window and 0 elsewhere (no separate zero fill, no scatter).
template <class T>
void max_pool2x2_backward(const PoolGeometry g, const T* STRATA_RESTRICT dy, const std::int32_t* STRATA_RESTRICT argmax,
                          T* STRATA_RESTRICT dx) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oy = 0; oy < OH; ++oy) {
      const T* STRATA_RESTRICT gy = dy + (p * OH + oy) * OW;
      const std::int32_t* STRATA_RESTRICT a = argmax + (p * OH + oy) * OW;
      T* STRATA_RESTRICT d0 = dx + (p * g.h + 2 * oy) * g.w;
      T* STRATA_RESTRICT d1 = d0 + g.w;
      const auto b0 = static_cast<std::int32_t>(2 * oy * g.w), b1 = static_cast<std::int32_t>(b0 + g.w);
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        const std::int32_t at = a[ox], x0 = static_cast<std::int32_t>(2 * ox);
        const T v = gy[ox];
        d0[2 * ox] = at == b0 + x0 ? v : T(0);
        d0[2 * ox + 1] = at == b0 + x0 + 1 ? v : T(0);
        d1[2 * ox] = at == b1 + x0 ? v : T(0);
        d1[2 * ox + 1] = at == b1 + x0 + 1 ? v : T(0);
      }
    }
}

}  // namespace detail

/// y = max over each window; `argmax` receives the flat index (within its plane) of the winner.
template <class T>
void max_pool2d_forward(const PoolGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT y,
                        std::int32_t* STRATA_RESTRICT argmax) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  if (g.k == 2 && g.stride == 2 && g.pad == 0) return detail::max_pool2x2_forward(g, x, y, argmax);
  for (std::int64_t p = 0; p < g.planes; ++p) {
    const T* in = x + p * g.h * g.w;
    for (std::int64_t oy = 0; oy < OH; ++oy)
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        T best;
        std::int32_t arg;
        math::max_pool_window(g, in, oy, ox, best, arg);
        const std::int64_t o = (p * OH + oy) * OW + ox;
        y[o] = best;
        argmax[o] = arg;
      }
  }
}

/// dx[argmax] += dy; dx is overwritten first unless `accumulate`.
template <class T>
void max_pool2d_backward(const PoolGeometry g, const T* STRATA_RESTRICT dy, const std::int32_t* STRATA_RESTRICT argmax,
                         T* STRATA_RESTRICT dx, bool accumulate) {
  if (!accumulate && g.k == 2 && g.stride == 2 && g.pad == 0 && g.h % 2 == 0 && g.w % 2 == 0)
    return detail::max_pool2x2_backward(g, dy, argmax, dx);
  const std::int64_t OH = g.oh(), OW = g.ow(), plane = g.h * g.w;
  if (!accumulate) std::fill_n(dx, g.planes * plane, T(0));
  for (std::int64_t p = 0; p < g.planes; ++p) {
    T* d = dx + p * plane;
    const T* gy = dy + p * OH * OW;
    const std::int32_t* a = argmax + p * OH * OW;
    for (std::int64_t o = 0; o < OH * OW; ++o)
      if (a[o] >= 0) d[a[o]] += gy[o];
  }
}

/// y = the mean of each k x k window, padding counted as zeros in the k * k divisor.
template <class T>
void avg_pool2d_forward(const PoolGeometry& g, const T* x, T* y) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  const T inv = T(1) / static_cast<T>(g.k * g.k);
  for (std::int64_t p = 0; p < g.planes; ++p) {
    const T* in = x + p * g.h * g.w;
    T* out = y + p * OH * OW;
    for (std::int64_t oy = 0; oy < OH; ++oy)
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        T s = 0;
        for (std::int64_t i = std::max<std::int64_t>(0, oy * g.stride - g.pad);
             i < std::min<std::int64_t>(g.h, oy * g.stride - g.pad + g.k); ++i)
          for (std::int64_t j = std::max<std::int64_t>(0, ox * g.stride - g.pad);
               j < std::min<std::int64_t>(g.w, ox * g.stride - g.pad + g.k); ++j)
            s += in[i * g.w + j];
        out[oy * OW + ox] = s * inv;
      }
  }
}

/// dx (+)= each window's dy / (k * k) spread over the window's elements inside the image.
template <class T>
void avg_pool2d_backward(const PoolGeometry& g, const T* dy, T* dx, bool accumulate) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  const T inv = T(1) / static_cast<T>(g.k * g.k);
  if (!accumulate) std::fill_n(dx, g.planes * g.h * g.w, T(0));
  for (std::int64_t p = 0; p < g.planes; ++p) {
    T* d = dx + p * g.h * g.w;
    const T* go = dy + p * OH * OW;
    for (std::int64_t oy = 0; oy < OH; ++oy)
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        const T v = go[oy * OW + ox] * inv;
        for (std::int64_t i = std::max<std::int64_t>(0, oy * g.stride - g.pad);
             i < std::min<std::int64_t>(g.h, oy * g.stride - g.pad + g.k); ++i)
          for (std::int64_t j = std::max<std::int64_t>(0, ox * g.stride - g.pad);
               j < std::min<std::int64_t>(g.w, ox * g.stride - g.pad + g.k); ++j)
            d[i * g.w + j] += v;
      }
  }
}

}  // namespace strata::kernels::cpu

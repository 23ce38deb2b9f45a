/// \file
/// 2-D max pooling over NCHW, forward (keeping the argmax) and backward (scatter to it).
#pragma once

#include <algorithm>  // std::fill_n
#include <cstdint>

#include <strata/config.hpp>            // STRATA_RESTRICT
#include <strata/kernels/math/pool.hpp>  // PoolGeometry, max_pool_window

namespace strata::kernels::cpu {

using math::PoolGeometry;

/// y = max over each window; `argmax` receives the flat index (within its plane) of the winner.
template <class T>
void max_pool2d_forward(const PoolGeometry g, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT y,
                        std::int32_t* STRATA_RESTRICT argmax) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  if (g.k == 2 && g.stride == 2 && g.pad == 0) {  // the common case: 2x2 windows inside the image
    for (std::int64_t p = 0; p < g.planes; ++p) {
      const T* in = x + p * g.h * g.w;
      T* out = y + p * OH * OW;
      std::int32_t* arg = argmax + p * OH * OW;
      for (std::int64_t oy = 0; oy < OH; ++oy) {
        const T* r0 = in + 2 * oy * g.w;
        const T* r1 = r0 + g.w;
        const auto base0 = static_cast<std::int32_t>(2 * oy * g.w), base1 = static_cast<std::int32_t>(base0 + g.w);
        for (std::int64_t ox = 0; ox < OW; ++ox) {
          // Branch-free over the window, in window order; a NaN candidate wins (max propagates
          // NaN) and a NaN best is never replaced by a number.
          const auto x0 = static_cast<std::int32_t>(2 * ox);
          T best = r0[x0];
          std::int32_t at = base0 + x0;
          auto take = [&](T c, std::int32_t idx) {
            const bool t = (c > best) | (c != c);
            best = t ? c : best;
            at = t ? idx : at;
          };
          take(r0[x0 + 1], base0 + x0 + 1);
          take(r1[x0], base1 + x0);
          take(r1[x0 + 1], base1 + x0 + 1);
          out[oy * OW + ox] = best;
          arg[oy * OW + ox] = at;
        }
      }
    }
    return;
  }
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

}  // namespace strata::kernels::cpu

/// \file
/// 2-D max pooling's geometry and one output window, shared by the CPU loop and the CUDA
/// kernel: the winner of a window is its largest element, a NaN winning (max propagates NaN).
#pragma once

#include <cmath>  // HUGE_VAL
#include <cstdint>

#include <strata/config.hpp>  // STRATA_HOST_DEVICE

namespace strata::kernels::math {

struct PoolGeometry {
  std::int64_t planes, h, w;  // planes = N * C
  std::int64_t k, stride, pad;
  STRATA_HOST_DEVICE std::int64_t oh() const noexcept { return (h + 2 * pad - k) / stride + 1; }
  STRATA_HOST_DEVICE std::int64_t ow() const noexcept { return (w + 2 * pad - k) / stride + 1; }
};

/// The maximum of window (oy, ox) of the plane `in` and its flat index in the plane (-1 if the
/// window lies wholly in the padding).
template <class T>
STRATA_HOST_DEVICE void max_pool_window(const PoolGeometry& g, const T* in, std::int64_t oy, std::int64_t ox, T& best,
                                        std::int32_t& arg) noexcept {
  best = static_cast<T>(-HUGE_VAL);  // (numeric_limits is not callable from device code)
  arg = -1;
  for (std::int64_t i = 0; i < g.k; ++i) {
    const std::int64_t iy = oy * g.stride - g.pad + i;
    if (iy < 0 || iy >= g.h) continue;
    for (std::int64_t j = 0; j < g.k; ++j) {
      const std::int64_t ix = ox * g.stride - g.pad + j;
      if (ix < 0 || ix >= g.w) continue;
      const T v = in[iy * g.w + ix];
      if (arg < 0 || v > best || v != v) {
        best = v;
        arg = static_cast<std::int32_t>(iy * g.w + ix);
      }
    }
  }
}

}  // namespace strata::kernels::math

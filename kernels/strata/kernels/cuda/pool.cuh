/// \file
/// 2-D max and average pooling over NCHW on the device: one thread per output element runs the
/// CPU's own window (kernels/math/pool.hpp); max pooling's backward pass scatters each gradient
/// to its window's winner (atomically, as overlapping windows may share one), average pooling's
/// gathers, one thread per input element, the windows that hold it (no atomics).
#pragma once

#include <cstdint>

#include <strata/kernels/cuda/launch.cuh>
#include <strata/kernels/math/pool.hpp>

namespace strata::kernels::cuda {

namespace kernel {

template <class T>
__global__ void max_pool2d_forward(math::PoolGeometry g, const T* x, T* y, std::int32_t* argmax) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  STRATA_GRID_STRIDE_LOOP(o, g.planes * OH * OW) {
    const std::int64_t p = o / (OH * OW), rest = o - p * OH * OW, oy = rest / OW, ox = rest - oy * OW;
    T best;
    std::int32_t arg;
    math::max_pool_window(g, x + p * g.h * g.w, oy, ox, best, arg);
    y[o] = best;
    argmax[o] = arg;
  }
}

template <class T>
__global__ void max_pool2d_backward(math::PoolGeometry g, const T* dy, const std::int32_t* argmax, T* dx) {
  const std::int64_t OHW = g.oh() * g.ow();
  STRATA_GRID_STRIDE_LOOP(o, g.planes * OHW) {
    if (argmax[o] >= 0) atomicAdd(dx + (o / OHW) * g.h * g.w + argmax[o], dy[o]);
  }
}

template <class T>
__global__ void avg_pool2d_forward(math::PoolGeometry g, const T* x, T* y) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  const T inv = T(1) / static_cast<T>(g.k * g.k);
  STRATA_GRID_STRIDE_LOOP(o, g.planes * OH * OW) {
    const std::int64_t p = o / (OH * OW), rest = o - p * OH * OW, oy = rest / OW, ox = rest - oy * OW;
    const T* in = x + p * g.h * g.w;
    const std::int64_t y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
    T s = 0;
    for (std::int64_t i = y0 < 0 ? 0 : y0; i < y0 + g.k && i < g.h; ++i)
      for (std::int64_t j = x0 < 0 ? 0 : x0; j < x0 + g.k && j < g.w; ++j) s += in[i * g.w + j];
    y[o] = s * inv;
  }
}

/// dx[i, j] (+)= the sum of dy over the windows that hold (i, j), over k * k.
template <class T>
__global__ void avg_pool2d_backward(math::PoolGeometry g, const T* dy, T* dx, bool accumulate) {
  const std::int64_t OH = g.oh(), OW = g.ow();
  const T inv = T(1) / static_cast<T>(g.k * g.k);
  STRATA_GRID_STRIDE_LOOP(e, g.planes * g.h * g.w) {
    const std::int64_t p = e / (g.h * g.w), rest = e - p * g.h * g.w, iy = rest / g.w, ix = rest - iy * g.w;
    const T* go = dy + p * OH * OW;
    // Windows oy with oy*stride - pad <= iy < oy*stride - pad + k.
    const std::int64_t ty = iy + g.pad, tx = ix + g.pad;
    const std::int64_t oy_lo = ty - g.k + 1 <= 0 ? 0 : (ty - g.k + 1 + g.stride - 1) / g.stride;
    const std::int64_t ox_lo = tx - g.k + 1 <= 0 ? 0 : (tx - g.k + 1 + g.stride - 1) / g.stride;
    const std::int64_t oy_hi = ty / g.stride < OH - 1 ? ty / g.stride : OH - 1;
    const std::int64_t ox_hi = tx / g.stride < OW - 1 ? tx / g.stride : OW - 1;
    T s = 0;
    for (std::int64_t oy = oy_lo; oy <= oy_hi; ++oy)
      for (std::int64_t ox = ox_lo; ox <= ox_hi; ++ox) s += go[oy * OW + ox] * inv;
    dx[e] = accumulate ? dx[e] + s : s;
  }
}

}  // namespace kernel

template <class T>
void max_pool2d_forward(const math::PoolGeometry& g, const T* x, T* y, std::int32_t* argmax, cudaStream_t s) {
  const std::int64_t n = g.planes * g.oh() * g.ow();
  if (n == 0) return;
  kernel::max_pool2d_forward<T><<<blocks_for(n), kThreads, 0, s>>>(g, x, y, argmax);
  STRATA_CUDA_CHECK_LAUNCH("max_pool2d_forward");
}

/// dx[argmax] += dy; dx is zeroed first unless `accumulate`.
template <class T>
void max_pool2d_backward(const math::PoolGeometry& g, const T* dy, const std::int32_t* argmax, T* dx, bool accumulate,
                         cudaStream_t s) {
  if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(T) * static_cast<std::size_t>(g.planes * g.h * g.w), s));
  const std::int64_t n = g.planes * g.oh() * g.ow();
  if (n == 0) return;
  kernel::max_pool2d_backward<T><<<blocks_for(n), kThreads, 0, s>>>(g, dy, argmax, dx);
  STRATA_CUDA_CHECK_LAUNCH("max_pool2d_backward");
}

template <class T>
void avg_pool2d_forward(const math::PoolGeometry& g, const T* x, T* y, cudaStream_t s) {
  const std::int64_t n = g.planes * g.oh() * g.ow();
  if (n == 0) return;
  kernel::avg_pool2d_forward<T><<<blocks_for(n), kThreads, 0, s>>>(g, x, y);
  STRATA_CUDA_CHECK_LAUNCH("avg_pool2d_forward");
}

template <class T>
void avg_pool2d_backward(const math::PoolGeometry& g, const T* dy, T* dx, bool accumulate, cudaStream_t s) {
  const std::int64_t n = g.planes * g.h * g.w;
  if (n == 0) return;
  kernel::avg_pool2d_backward<T><<<blocks_for(n), kThreads, 0, s>>>(g, dy, dx, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("avg_pool2d_backward");
}

}  // namespace strata::kernels::cuda

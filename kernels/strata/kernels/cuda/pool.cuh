/// \file
/// 2-D max pooling over NCHW on the device: one thread per output element runs the CPU's own
/// window (kernels/math/pool.hpp); the backward pass scatters each gradient to its window's
/// winner (atomically, as overlapping windows may share one).
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

}  // namespace strata::kernels::cuda

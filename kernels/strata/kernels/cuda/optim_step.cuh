/// \file
/// The fused optimizer steps on the device: one kernel reads parameter, gradient and state
/// once and writes them once. The element update is kernels/math/optim.hpp's, the one the
/// CPU loop runs, and the coefficients come from the same host code (kernels/math/optim.hpp).
#pragma once

#include <cstdint>

#include <strata/kernels/math/optim.hpp>  // the element updates, SgdParams, AdamParams and their coefficients
#include <strata/kernels/cuda/launch.cuh>

namespace strata::kernels::cuda {

namespace kernel {

template <math::SgdVariant V, class T>
__global__ void sgd_step(std::int64_t n, T* p, const T* g, T* buf, math::SgdCoeffs<T> c) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    T unused{};
    math::sgd_update<V>(p[i], g[i], V == math::SgdVariant::plain ? unused : buf[i], c);
  }
}

template <class T>
__global__ void adam_step(std::int64_t n, T* p, const T* g, T* m, T* v, math::AdamCoeffs<T> c) {
  STRATA_GRID_STRIDE_LOOP(i, n) math::adam_update(p[i], g[i], m[i], v[i], c);
}

}  // namespace kernel

/// SGD (momentum, Nesterov, weight decay): the CPU's sgd_step on the device.
template <class T>
void sgd_step(std::int64_t n, T* p, const T* g, T* buf, const math::SgdParams& o, cudaStream_t s) {
  if (n == 0) return;
  const auto c = math::sgd_coeffs<T>(o);
  using V = math::SgdVariant;
  switch (math::sgd_variant(o)) {
    case V::plain: kernel::sgd_step<V::plain, T><<<blocks_for(n), kThreads, 0, s>>>(n, p, g, buf, c); break;
    case V::first_momentum:
      kernel::sgd_step<V::first_momentum, T><<<blocks_for(n), kThreads, 0, s>>>(n, p, g, buf, c);
      break;
    case V::momentum: kernel::sgd_step<V::momentum, T><<<blocks_for(n), kThreads, 0, s>>>(n, p, g, buf, c); break;
    case V::nesterov: kernel::sgd_step<V::nesterov, T><<<blocks_for(n), kThreads, 0, s>>>(n, p, g, buf, c); break;
  }
  STRATA_CUDA_CHECK_LAUNCH("sgd_step");
}

/// Adam / AdamW: the CPU's adam_step on the device.
template <class T>
void adam_step(std::int64_t n, T* p, const T* g, T* m, T* v, const math::AdamParams& o, cudaStream_t s) {
  if (n == 0) return;
  kernel::adam_step<T><<<blocks_for(n), kThreads, 0, s>>>(n, p, g, m, v, math::adam_coeffs<T>(o));
  STRATA_CUDA_CHECK_LAUNCH("adam_step");
}

}  // namespace strata::kernels::cuda

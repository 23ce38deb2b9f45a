// Host vectors to and from cuda:0 tensors, and random data, for the CUDA tests. The CUDA
// backend is registered by the object every CUDA test program links (cuda_backend_objects), so
// a test compiled by the host compiler creates cuda:0 tensors as a .cu one does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <strata/kernels/cuda/allocator.hpp>  // the caching allocators
#include <strata/kernels/cuda/runtime.hpp>    // compute_stream
#include <strata/strata.hpp>

namespace cuda_test {

inline const strata::Device kDev = strata::Device::cuda(0);

inline cudaStream_t stream() { return strata::kernels::cuda::compute_stream(0); }

/// A cuda:0 tensor holding `v`.
template <class T>
strata::Tensor upload(const std::vector<T>& v, const strata::Shape& shape) {
  strata::Tensor h = strata::Tensor::empty(shape, strata::dtype_v<T>);
  std::copy(v.begin(), v.end(), h.data<T>());
  return h.to(kDev);
}

template <class T>
std::vector<T> download(const strata::Tensor& t) {
  return t.to_vector<T>();
}

/// n values uniform in [lo, hi), the same for the same seed.
template <class T>
std::vector<T> random_vector(std::size_t n, std::uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

}  // namespace cuda_test

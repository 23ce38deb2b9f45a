/// \file
/// Batch normalisation on the device in the CPU kernel's pieces (kernels/cpu/batch_norm.hpp):
/// per-channel sums in double, one block per channel (the host adds them across replicas and
/// turns them into statistics), the output pass with the ResNet's "+ shortcut, ReLU" fused, the
/// gradient's sums with the ReLU's mask applied in place, and the input's gradient.
#pragma once

#include <cstdint>

#include <strata/kernels/cuda/launch.cuh>
#include <strata/kernels/cuda/reduce.cuh>  // block_sum

namespace strata::kernels::cuda {

namespace kernel {

/// sum[c] = Σ x, sumsq[c] = Σ x² of channel c (one block per channel), about the channel's
/// first value, as the CPU kernel takes them.
template <class T>
__global__ void channel_moments(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x,
                                double* sum, double* sumsq) {
  const std::int64_t c = blockIdx.x;
  const T k = x[c * plane];
  double s = 0, q = 0;
  for (std::int64_t j = threadIdx.x; j < images * plane; j += blockDim.x) {
    const std::int64_t n = j / plane, p = j - n * plane;
    const double v = static_cast<double>(x[(n * channels + c) * plane + p] - k);
    s += v;
    q += v * v;
  }
  s = block_sum(s);
  __syncthreads();  // block_sum's shared partials are reused
  q = block_sum(q);
  if (threadIdx.x == 0) {
    const double kk = static_cast<double>(k), count = static_cast<double>(images * plane);
    sum[c] = s + count * kk;
    sumsq[c] = q + 2 * kk * s + count * kk * kk;
  }
}

template <class T>
__global__ void batch_norm_apply(std::int64_t n, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                                 const T* rstd, const T* w, const T* b, const T* r, bool relu, T* y) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t c = (i / plane) % channels;
    const T scale = rstd[c] * (w ? w[c] : T(1));
    const T shift = (b ? b[c] : T(0)) - mean[c] * scale;
    T v = x[i] * scale + shift;
    if (r) v += r[i];
    y[i] = relu && !(v > T(0)) ? T(0) : v;
  }
}

/// sum_dy[c] = Σ dy, sum_dy_h[c] = Σ dy h (one block per channel); dy masked in place by the
/// fused ReLU's output when given.
template <class T>
__global__ void batch_norm_grad_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x,
                                     const T* mean, const T* rstd, T* dy, const T* relu_out, double* sum_dy,
                                     double* sum_dy_h) {
  const std::int64_t c = blockIdx.x;
  const T m = mean[c];
  double s = 0, sh = 0;
  for (std::int64_t j = threadIdx.x; j < images * plane; j += blockDim.x) {
    const std::int64_t n = j / plane, p = j - n * plane, at = (n * channels + c) * plane + p;
    T g = dy[at];
    if (relu_out) {
      g = relu_out[at] > T(0) ? g : T(0);
      dy[at] = g;
    }
    s += static_cast<double>(g);
    sh += static_cast<double>(g * (x[at] - m));
  }
  s = block_sum(s);
  __syncthreads();
  sh = block_sum(sh);
  if (threadIdx.x == 0) {
    sum_dy[c] = s;
    sum_dy_h[c] = sh * static_cast<double>(rstd[c]);
  }
}

template <class T>
__global__ void batch_norm_input_grad(std::int64_t n, std::int64_t channels, std::int64_t plane, const T* x,
                                      const T* mean, const T* rstd, const T* w, const T* dy, const T* mean_dy,
                                      const T* mean_dy_h, T* dx, bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t c = (i / plane) % channels;
    const T r = rstd[c], k = r * (w ? w[c] : T(1));
    const T md = mean_dy ? mean_dy[c] : T(0), rmh = r * (mean_dy_h ? mean_dy_h[c] : T(0));
    const T v = k * (dy[i] - md - (x[i] - mean[c]) * rmh);
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

}  // namespace kernel

/// sums[0, C) = Σ x, sums[C, 2C) = Σ x² per channel (device memory, double).
template <class T>
void channel_moments(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, double* sums,
                     cudaStream_t s) {
  if (channels == 0) return;
  if (images * plane == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(double) * static_cast<std::size_t>(2 * channels), s));
    return;
  }
  kernel::channel_moments<T><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(images, channels, plane, x, sums,
                                                                                 sums + channels);
  STRATA_CUDA_CHECK_LAUNCH("channel_moments");
}

template <class T>
void batch_norm_apply(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                      const T* rstd, const T* w, const T* b, const T* r, bool relu, T* y, cudaStream_t s) {
  const std::int64_t n = images * channels * plane;
  if (n == 0) return;
  kernel::batch_norm_apply<T><<<blocks_for(n), kThreads, 0, s>>>(n, channels, plane, x, mean, rstd, w, b, r, relu, y);
  STRATA_CUDA_CHECK_LAUNCH("batch_norm_apply");
}

/// sums[0, C) = Σ dy, sums[C, 2C) = Σ dy h per channel (device memory, double).
template <class T>
void batch_norm_grad_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                          const T* rstd, T* dy, const T* relu_out, double* sums, cudaStream_t s) {
  if (channels == 0) return;
  if (images * plane == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(double) * static_cast<std::size_t>(2 * channels), s));
    return;
  }
  kernel::batch_norm_grad_sums<T><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(
      images, channels, plane, x, mean, rstd, dy, relu_out, sums, sums + channels);
  STRATA_CUDA_CHECK_LAUNCH("batch_norm_grad_sums");
}

template <class T>
void batch_norm_input_grad(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                           const T* rstd, const T* w, const T* dy, const T* mean_dy, const T* mean_dy_h, T* dx,
                           bool accumulate, cudaStream_t s) {
  const std::int64_t n = images * channels * plane;
  if (n == 0) return;
  kernel::batch_norm_input_grad<T><<<blocks_for(n), kThreads, 0, s>>>(n, channels, plane, x, mean, rstd, w, dy,
                                                                      mean_dy, mean_dy_h, dx, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("batch_norm_input_grad");
}

}  // namespace strata::kernels::cuda

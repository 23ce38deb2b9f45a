/// \file
/// Row kernels on the device, one warp per row: the scaled, causally masked softmax and its
/// backward, log-softmax and its backward, and layer normalisation forward and backward. Each
/// follows its CPU kernel (kernels/cpu/softmax.hpp, kernels/cpu/layer_norm.hpp) rule for rule:
/// the same mask, the row maximum subtracted, layer norm's statistics (mean, 1/σ) kept per row.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/kernels/cuda/launch.cuh>
#include <strata/kernels/cuda/reduce.cuh>   // sum_columns: layer norm's weight and bias gradients
#include <strata/kernels/cuda/softmax.cuh>  // warp_max, warp_sum, kRowsPerBlock

namespace strata::kernels::cuda {

namespace kernel {

/// kernels/cpu/softmax.hpp's causal_visible, on the device.
__device__ inline std::int64_t causal_visible(std::int64_t r, std::int64_t cols, std::int64_t period) {
  if (period <= 0) return cols;
  const std::int64_t v = r % period + cols - period + 1;
  return v < 0 ? 0 : (v > cols ? cols : v);
}

/// The row this warp works on (blockDim = 32 x kRowsPerBlock), or -1 past the last.
__device__ inline std::int64_t warp_row(std::int64_t rows) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  return r < rows ? r : -1;
}

template <class T>
__global__ void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y, T scale,
                                std::int64_t period) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* xr = x + r * cols;
  T* yr = y + r * cols;
  const std::int64_t vis = causal_visible(r, cols, period);
  T mx = vis > 0 ? xr[0] : T(0);
  for (std::int64_t c = threadIdx.x; c < vis; c += 32) mx = xr[c] > mx ? xr[c] : mx;
  mx = warp_max(mx);
  T s = 0;
  for (std::int64_t c = threadIdx.x; c < vis; c += 32) {
    const T e = std::exp(scale * (xr[c] - mx));
    yr[c] = e;
    s += e;
  }
  s = warp_sum(s);
  const T inv = vis > 0 ? T(1) / s : T(0);
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) yr[c] = c < vis ? yr[c] * inv : T(0);
}

template <class T>
__global__ void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T scale, T* dx,
                                 bool accumulate) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* yr = y + r * cols;
  const T* gr = dy + r * cols;
  T* dr = dx + r * cols;
  T dot = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) dot += gr[c] * yr[c];
  dot = warp_sum(dot);
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T v = scale * yr[c] * (gr[c] - dot);
    dr[c] = accumulate ? dr[c] + v : v;
  }
}

template <class T>
__global__ void log_softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* xr = x + r * cols;
  T* yr = y + r * cols;
  T mx = xr[0];
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) mx = xr[c] > mx ? xr[c] : mx;
  mx = warp_max(mx);
  T s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) s += std::exp(xr[c] - mx);
  const T lse = mx + std::log(warp_sum(s));
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) yr[c] = xr[c] - lse;
}

template <class T>
__global__ void log_softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx,
                                     bool accumulate) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* yr = y + r * cols;
  const T* gr = dy + r * cols;
  T* dr = dx + r * cols;
  T s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) s += gr[c];
  s = warp_sum(s);
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T v = gr[c] - std::exp(yr[c]) * s;
    dr[c] = accumulate ? dr[c] + v : v;
  }
}

/// Statistics in double, as the CPU kernel adds its lanes in double.
template <class T>
__global__ void layer_norm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* b,
                                   double eps, T* y, T* stats) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* xr = x + r * cols;
  T* yr = y + r * cols;
  double s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) s += static_cast<double>(xr[c]);
  const T mt = static_cast<T>(warp_sum(s) / static_cast<double>(cols));
  double q = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T d = xr[c] - mt;
    q += static_cast<double>(d * d);
  }
  const T rstd = static_cast<T>(1.0 / std::sqrt(warp_sum(q) / static_cast<double>(cols) + eps));
  if (threadIdx.x == 0) {
    stats[2 * r] = mt;
    stats[2 * r + 1] = rstd;
  }
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T h = (xr[c] - mt) * rstd;
    yr[c] = (w ? h * w[c] : h) + (b ? b[c] : T(0));
  }
}

/// dx (+)= rstd (dh - mean(dh) - h mean(dh h)), dh = dy w; `dyh`, when not null, receives
/// dy * h for the weight's gradient (a column sum afterwards).
template <class T>
__global__ void layer_norm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* stats,
                                    const T* dy, T* dx, bool accumulate, T* dyh) {
  const std::int64_t r = warp_row(rows);
  if (r < 0) return;
  const T* xr = x + r * cols;
  const T* gr = dy + r * cols;
  const T m = stats[2 * r], rstd = stats[2 * r + 1];
  T sum_dh = 0, sum_dh_h = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T h = (xr[c] - m) * rstd;
    const T dh = w ? gr[c] * w[c] : gr[c];
    sum_dh += dh;
    sum_dh_h += dh * h;
    if (dyh) dyh[r * cols + c] = gr[c] * h;
  }
  if (!dx) return;
  const T inv_cols = T(1) / static_cast<T>(cols);
  const T mean_dh = warp_sum(sum_dh) * inv_cols, mean_dh_h = warp_sum(sum_dh_h) * inv_cols;
  T* dr = dx + r * cols;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T h = (xr[c] - m) * rstd;
    const T dh = w ? gr[c] * w[c] : gr[c];
    const T v = rstd * (dh - mean_dh - h * mean_dh_h);
    dr[c] = accumulate ? dr[c] + v : v;
  }
}

}  // namespace kernel

/// Blocks of kRowsPerBlock warps, one warp per row.
inline unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

/// y = softmax(scale * x) per row over the entries a causal mask of `period` keeps (0: all).
template <class T>
void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y, T scale, std::int64_t period,
                     cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::softmax_forward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(rows, cols, x, y, scale, period);
  STRATA_CUDA_CHECK_LAUNCH("softmax_forward");
}

/// dx (+)= scale * y * (dy - sum(dy * y)) per row.
template <class T>
void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T scale, T* dx, bool accumulate,
                      cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::softmax_backward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(rows, cols, y, dy, scale, dx,
                                                                                 accumulate);
  STRATA_CUDA_CHECK_LAUNCH("softmax_backward");
}

template <class T>
void log_softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y, cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::log_softmax_forward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(rows, cols, x, y);
  STRATA_CUDA_CHECK_LAUNCH("log_softmax_forward");
}

template <class T>
void log_softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx, bool accumulate,
                          cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::log_softmax_backward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(rows, cols, y, dy, dx,
                                                                                     accumulate);
  STRATA_CUDA_CHECK_LAUNCH("log_softmax_backward");
}

template <class T>
void layer_norm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* b, double eps, T* y,
                        T* stats, cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::layer_norm_forward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(rows, cols, x, w, b, eps, y,
                                                                                   stats);
  STRATA_CUDA_CHECK_LAUNCH("layer_norm_forward");
}

/// Layer norm's gradients; dx, dw, db may each be null. `scratch` (rows * cols of T) holds
/// dy * h when dw is wanted.
template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* stats, const T* dy,
                         T* dx, bool accumulate_dx, T* dw, bool accumulate_dw, T* db, bool accumulate_db, T* scratch,
                         cudaStream_t s) {
  if (cols == 0) return;
  if (rows > 0 && (dx || dw))
    kernel::layer_norm_backward<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, s>>>(
        rows, cols, x, w, stats, dy, dx, accumulate_dx, dw ? scratch : nullptr);
  STRATA_CUDA_CHECK_LAUNCH("layer_norm_backward");
  if (dw) sum_columns<T>(rows, cols, scratch, dw, accumulate_dw, s);
  if (db) sum_columns<T>(rows, cols, dy, db, accumulate_db, s);
}

}  // namespace strata::kernels::cuda

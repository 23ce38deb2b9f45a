/// \file
/// The fused softmax + cross-entropy on the device, one warp per row: the row maximum, the
/// sum of exponentials and the loss in one kernel (numerically stable, like the CPU kernel),
/// the probabilities kept for the backward pass. A row whose label is negative is padding:
/// its loss and gradient are 0.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/kernels/cuda/launch.cuh>
#include <strata/kernels/cuda/reduce.cuh>

namespace strata::kernels::cuda {

namespace kernel {

template <class T>
__device__ T warp_max(T v) {
  for (int off = 16; off > 0; off /= 2) {
    const T o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}
template <class T>
__device__ T warp_sum(T v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// One warp per row (blockDim = 32 x kRowsPerBlock).
template <class T, class Label>
__global__ void softmax_xent_forward(std::int64_t rows, std::int64_t cols, const T* x, const Label* label, T* prob,
                                     T* row_loss) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  T* pr = prob + r * cols;
  T mx = xr[0];
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) mx = xr[c] > mx ? xr[c] : mx;
  mx = warp_max(mx);
  T s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) {
    const T e = std::exp(xr[c] - mx);
    pr[c] = e;
    s += e;
  }
  s = warp_sum(s);
  const T inv = T(1) / s;
  for (std::int64_t c = threadIdx.x; c < cols; c += 32) pr[c] *= inv;
  if (threadIdx.x == 0) row_loss[r] = label[r] >= 0 ? mx + std::log(s) - xr[label[r]] : T(0);
}

template <class T, class Label>
__global__ void softmax_xent_backward(std::int64_t rows, std::int64_t cols, const T* prob, const Label* label,
                                      T scale, T* dx, bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(i, rows * cols) {
    const std::int64_t r = i / cols, c = i - r * cols;
    const T v = label[r] < 0 ? T(0) : scale * (prob[i] - (c == static_cast<std::int64_t>(label[r]) ? T(1) : T(0)));
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

}  // namespace kernel

inline constexpr int kRowsPerBlock = 8;

/// prob = softmax(x) per row; *loss = scale * the sum of the rows' cross-entropies.
/// `row_loss` is rows elements of device scratch.
template <class T, class Label>
void softmax_xent_forward(int device, std::int64_t rows, std::int64_t cols, const T* x, const Label* label, T* prob,
                          T* row_loss, T* loss, double scale, cudaStream_t s) {
  // Each row's warp starts its maximum from the row's first element.
  if (cols == 0 && rows > 0) STRATA_THROW(invalid_argument, "strata.cuda", "softmax cross-entropy over zero classes");
  if (rows == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(T), s));
    return;
  }
  const dim3 block(32, kRowsPerBlock);
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  kernel::softmax_xent_forward<T, Label><<<grid, block, 0, s>>>(rows, cols, x, label, prob, row_loss);
  STRATA_CUDA_CHECK_LAUNCH("softmax_xent_forward");
  sum(device, rows, row_loss, loss, scale, false, s);
}

/// dx (+)= scale * (prob - onehot(label)) per row.
template <class T, class Label>
void softmax_xent_backward(std::int64_t rows, std::int64_t cols, const T* prob, const Label* label, T scale, T* dx,
                           bool accumulate, cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::softmax_xent_backward<T, Label>
      <<<blocks_for(rows * cols), kThreads, 0, s>>>(rows, cols, prob, label, scale, dx, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("softmax_xent_backward");
}

}  // namespace strata::kernels::cuda

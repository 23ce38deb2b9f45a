/// \file
/// Reductions on the device: the sum of a buffer (deterministic: a fixed tree of partial sums,
/// no atomics, so a run reproduces itself bitwise) and the per-column sums of a row-major
/// matrix (the bias gradient).
#pragma once

#include <cstdint>

#include <strata/kernels/cuda/allocator.hpp>
#include <strata/kernels/cuda/launch.cuh>

namespace strata::kernels::cuda {

namespace kernel {

/// The sum of a block's values, in thread 0 (blockDim.x == kThreads).
template <class T>
__device__ T block_sum(T v) {
  __shared__ T part[kThreads / 32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : T(0);
  if (warp == 0)
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

/// partial[block] = the sum of this block's grid-stride share of x, scaled.
template <class T, class Acc>
__global__ void partial_sums(std::int64_t n, const T* x, Acc* partial) {
  Acc v = 0;
  STRATA_GRID_STRIDE_LOOP(i, n) v += static_cast<Acc>(x[i]);
  v = block_sum(v);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

template <class T, class Acc>
__global__ void finish_sum(int parts, const Acc* partial, T* out, Acc scale, bool accumulate) {
  Acc v = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) v += partial[i];
  v = block_sum(v);
  if (threadIdx.x == 0) *out = static_cast<T>(v * scale) + (accumulate ? *out : T(0));
}

/// A block of kColumnLanes x kColumnLanes threads per kColumnLanes columns: thread (c, l) sums
/// rows l, l + kColumnLanes, ... of its column (neighbouring threads read neighbouring
/// columns of a row), then lane 0 adds the lanes' sums in lane order: deterministic, and
/// kColumnLanes times the threads of one per column, which left a layer norm's weight
/// gradient over thousands of rows at one block of mostly idle threads.
inline constexpr int kColumnLanes = 32;
template <class T>
__global__ void sum_columns(std::int64_t rows, std::int64_t cols, const T* x, T* out, bool accumulate) {
  __shared__ T part[kColumnLanes][kColumnLanes + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnLanes + threadIdx.x;
  T v = 0;
  if (c < cols)
    for (std::int64_t r = threadIdx.y; r < rows; r += kColumnLanes) v += x[r * cols + c];
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    T sum = 0;
    for (int l = 0; l < kColumnLanes; ++l) sum += part[l][threadIdx.x];
    out[c] = accumulate ? out[c] + sum : sum;
  }
}

/// One block per channel: out[c] (+)= the sum of x[i, c, :] over the images i.
template <class T>
__global__ void channel_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, T* out,
                             bool accumulate) {
  const std::int64_t c = blockIdx.x;
  T v = 0;
  for (std::int64_t j = threadIdx.x; j < images * plane; j += blockDim.x) {
    const std::int64_t i = j / plane, p = j - i * plane;
    v += x[(i * channels + c) * plane + p];
  }
  v = block_sum(v);
  if (threadIdx.x == 0) out[c] = accumulate ? out[c] + v : v;
}

}  // namespace kernel

/// out[c] (+)= sum of x[i, c, p] over images i and plane positions p (NCHW: the bias gradient
/// of a convolution).
template <class T>
void channel_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, T* out, bool accumulate,
                  cudaStream_t s) {
  if (channels == 0) return;
  kernel::channel_sums<T><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(images, channels, plane, x, out,
                                                                              accumulate);
  STRATA_CUDA_CHECK_LAUNCH("channel_sums");
}

/// *out (+)= scale * sum(x[0, n)), accumulated in double for float64 and float32 alike.
template <class T>
void sum(int device, std::int64_t n, const T* x, T* out, double scale, bool accumulate, cudaStream_t s) {
  constexpr int kMaxParts = 1024;
  const int parts = static_cast<int>(blocks_for(n) < kMaxParts ? blocks_for(n) : kMaxParts);
  auto& alloc = CachingDeviceAllocator::of(device);
  const std::size_t bytes = sizeof(double) * static_cast<std::size_t>(parts);
  auto* partial = static_cast<double*>(alloc.allocate(bytes));
  kernel::partial_sums<T, double><<<parts, kThreads, 0, s>>>(n, x, partial);
  kernel::finish_sum<T, double><<<1, kThreads, 0, s>>>(parts, partial, out, scale, accumulate);
  alloc.deallocate(partial, bytes);  // stream-ordered: the next user of the block runs after finish_sum
  STRATA_CUDA_CHECK_LAUNCH("sum");
}

/// out[c] (+)= sum over r of x[r, c], for a contiguous rows x cols matrix.
template <class T>
void sum_columns(std::int64_t rows, std::int64_t cols, const T* x, T* out, bool accumulate, cudaStream_t s) {
  if (cols == 0) return;
  const auto tiles = static_cast<unsigned>((cols + kernel::kColumnLanes - 1) / kernel::kColumnLanes);
  kernel::sum_columns<T><<<tiles, dim3(kernel::kColumnLanes, kernel::kColumnLanes), 0, s>>>(rows, cols, x, out,
                                                                                            accumulate);
  STRATA_CUDA_CHECK_LAUNCH("sum_columns");
}

}  // namespace strata::kernels::cuda

/// \file
/// Launch geometry shared by the elementwise kernels: grid-stride loops over 64-bit indices,
/// 256 threads per block, and at most a few waves of blocks (a grid-stride loop covers the
/// rest, so one launch serves any size).
#pragma once

#ifndef __CUDACC__
#error "this header holds CUDA kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cstdint>

#include <strata/kernels/cuda/runtime.hpp>

namespace strata::kernels::cuda {

inline constexpr int kThreads = 256;

/// Blocks for n elements: enough to fill the device, never more than the elements need.
inline unsigned blocks_for(std::int64_t n) {
  constexpr std::int64_t kMaxBlocks = 65535;
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

/// for (i = this thread's first index; i < n; i += the grid's width)
#define STRATA_GRID_STRIDE_LOOP(i, n)                                                                  \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

}  // namespace strata::kernels::cuda

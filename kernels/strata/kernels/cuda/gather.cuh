/// \file
/// Moving rows and parts of tensors on the device: a strided copy or add (concat's parts,
/// slice's gradient), the rows of a table at indices (embedding), and the table's gradient as
/// the sums of the output's gradient rows per table row, taken in the order a plan made on the
/// host gives (deterministic, no atomics: the same bits as the CPU's loop in position order).
#pragma once

#include <cstdint>

#include <strata/kernels/cuda/elementwise.cuh>  // StridedIndex
#include <strata/kernels/cuda/launch.cuh>

namespace strata::kernels::cuda {

namespace kernel {

/// dst[off1] (+)= src[off0] for every element of ix's shape.
template <class T>
__global__ void copy_strided(std::int64_t n, const T* src, T* dst, StridedIndex ix, bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    dst[off[1]] = accumulate ? dst[off[1]] + src[off[0]] : src[off[0]];
  }
}

template <class T, class I>
__global__ void gather_rows(std::int64_t n, std::int64_t cols, const T* table, const I* idx, T* out) {
  STRATA_GRID_STRIDE_LOOP(i, n * cols) {
    const std::int64_t r = i / cols, c = i - r * cols;
    out[i] = table[static_cast<std::int64_t>(idx[r]) * cols + c];
  }
}

/// plan = [segments row numbers | segments + 1 starts | positions in row order]; segment s
/// adds the gradient rows at positions order[starts[s] .. starts[s + 1]) to d[rows[s]].
template <class T>
__global__ void sum_rows(std::int64_t segments, std::int64_t cols, const std::int64_t* plan, const T* g, T* d) {
  const std::int64_t* rows = plan;
  const std::int64_t* starts = plan + segments;
  const std::int64_t* order = starts + segments + 1;
  STRATA_GRID_STRIDE_LOOP(i, segments * cols) {
    const std::int64_t s = i / cols, c = i - s * cols;
    T* dst = d + rows[s] * cols + c;
    T v = *dst;
    for (std::int64_t j = starts[s]; j < starts[s + 1]; ++j) v += g[order[j] * cols + c];
    *dst = v;
  }
}

}  // namespace kernel

/// dst (+)= src over `shape`, each read or written through its own element strides.
template <class T>
void copy_strided(Dims shape, const T* src, Dims src_strides, T* dst, Dims dst_strides, bool accumulate,
                  cudaStream_t s) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  if (n == 0) return;
  kernel::copy_strided<T><<<blocks_for(n), kThreads, 0, s>>>(n, src, dst, strided_index(shape, src_strides, dst_strides),
                                                             accumulate);
  STRATA_CUDA_CHECK_LAUNCH("copy_strided");
}

/// out[r, :] = table[idx[r], :] for n indices (checked on the host beforehand).
template <class T, class I>
void gather_rows(std::int64_t n, std::int64_t cols, const T* table, const I* idx, T* out, cudaStream_t s) {
  if (n * cols == 0) return;
  kernel::gather_rows<T, I><<<blocks_for(n * cols), kThreads, 0, s>>>(n, cols, table, idx, out);
  STRATA_CUDA_CHECK_LAUNCH("gather_rows");
}

/// d[rows[s], :] += the gradient rows of segment s (see kernel::sum_rows for the plan).
template <class T>
void sum_rows(std::int64_t segments, std::int64_t cols, const std::int64_t* plan, const T* g, T* d, cudaStream_t s) {
  if (segments * cols == 0) return;
  kernel::sum_rows<T><<<blocks_for(segments * cols), kThreads, 0, s>>>(segments, cols, plan, g, d);
  STRATA_CUDA_CHECK_LAUNCH("sum_rows");
}

}  // namespace strata::kernels::cuda

/// \file
/// Elementwise CUDA kernels and their host launchers: fill, strided gather (contiguous()),
/// binary arithmetic (same shape, or broadcast through strides), unary functions and their
/// backward, bias + activation over rows. The math is kernels/math/'s, shared with the CPU.
#pragma once

#include <cstdint>

#include <span>

#include <strata/kernels/cuda/launch.cuh>
#include <strata/kernels/math/binary.hpp>
#include <strata/kernels/math/unary.hpp>
#include <strata/kernels/math/limits.hpp>  // kMaxDims

namespace strata::kernels::cuda {

/// Extents and up to three operands' strides, passed to a kernel by value.
struct StridedIndex {
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[3][kMaxDims] = {};

  /// The three operands' offsets of the element at row-major position i.
  __device__ void offsets(std::int64_t i, std::int64_t (&off)[3]) const {
    off[0] = off[1] = off[2] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const std::int64_t q = i / shape[d], r = i - q * shape[d];
      off[0] += r * strides[0][d];
      off[1] += r * strides[1][d];
      off[2] += r * strides[2][d];
      i = q;
    }
  }
};

namespace kernel {

template <class T>
__global__ void fill(T* p, std::int64_t n, T v) {
  STRATA_GRID_STRIDE_LOOP(i, n) p[i] = v;
}

template <class T>
__global__ void gather(T* dst, const T* src, std::int64_t n, StridedIndex ix) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    dst[i] = src[off[0]];
  }
}

template <class T>
__global__ void binary_same(math::BinaryKind k, std::int64_t n, const T* a, const T* b, T* out) {
  STRATA_GRID_STRIDE_LOOP(i, n) out[i] = math::binary(k, a[i], b[i]);
}

template <class T>
__global__ void binary_broadcast(math::BinaryKind k, std::int64_t n, const T* a, const T* b, T* out,
                                 StridedIndex ix) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = math::binary(k, a[off[1]], b[off[2]]);
  }
}

template <class T>
__global__ void unary(std::int64_t k, std::int64_t n, const T* x, T s, T* y) {
  STRATA_GRID_STRIDE_LOOP(i, n) y[i] = math::unary_fwd<T>(k, x[i], s);
}

template <class T>
__global__ void unary_backward(std::int64_t k, std::int64_t n, const T* g, const T* x, const T* y, T s, T* d,
                               bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const T v = g[i] * math::unary_dydx<T>(k, x[i], y[i], s);
    d[i] = accumulate ? d[i] + v : v;
  }
}

template <class T>
__global__ void binary_backward(math::BinaryKind k, int which, std::int64_t n, const T* g, const T* a, const T* b, T* d,
                                bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const T v = which == 0 ? math::binary_grad_a(k, g[i], b[i]) : math::binary_grad_b(k, g[i], a[i], b[i]);
    d[i] = accumulate ? d[i] + v : v;
  }
}

template <class T>
__global__ void spread_scalar(std::int64_t n, const T* g, T scale, T* d, bool accumulate) {
  const T v = scale * *g;
  STRATA_GRID_STRIDE_LOOP(i, n) d[i] = accumulate ? d[i] + v : v;
}

template <class T>
__global__ void channel_bias_act(std::int64_t n, std::int64_t channels, std::int64_t plane, const T* src, const T* bias,
                                 bool relu, T* dst) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    T v = src[i] + (bias != nullptr ? bias[(i / plane) % channels] : T(0));
    dst[i] = relu && v < T(0) ? T(0) : v;
  }
}

template <class T>
__global__ void bias_act_rows(std::int64_t rows, std::int64_t cols, const T* src, const T* bias, bool relu, T* dst) {
  STRATA_GRID_STRIDE_LOOP(i, rows * cols) {
    T v = src[i] + (bias != nullptr ? bias[i % cols] : T(0));
    dst[i] = relu && v < T(0) ? T(0) : v;
  }
}

}  // namespace kernel

/// p[0, n) = v.
template <class T>
void fill(T* p, std::int64_t n, T v, cudaStream_t s) {
  if (n == 0) return;
  kernel::fill<T><<<blocks_for(n), kThreads, 0, s>>>(p, n, v);
  STRATA_CUDA_CHECK_LAUNCH("fill");
}

/// Extents or strides, outermost first (a tensor's Shape gives them with dims()).
using Dims = std::span<const std::int64_t>;

/// The strided index of `shape` with up to three stride vectors (missing ones are zero).
inline StridedIndex strided_index(Dims shape, Dims s0, Dims s1 = {}, Dims s2 = {}) {
  StridedIndex ix;
  ix.ndim = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    ix.shape[d] = shape[d];
    ix.strides[0][d] = s0.size() > d ? s0[d] : 0;
    ix.strides[1][d] = s1.size() > d ? s1[d] : 0;
    ix.strides[2][d] = s2.size() > d ? s2[d] : 0;
  }
  return ix;
}

/// dst (contiguous) = the elements of the view (shape, strides) at src, in row-major order.
template <class T>
void gather(T* dst, const T* src, Dims shape, Dims strides, cudaStream_t s) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  if (n == 0) return;
  kernel::gather<T><<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, strided_index(shape, strides));
  STRATA_CUDA_CHECK_LAUNCH("gather");
}

/// out = a (kind) b over n elements of three contiguous buffers.
template <class T>
void binary(math::BinaryKind k, std::int64_t n, const T* a, const T* b, T* out, cudaStream_t s) {
  if (n == 0) return;
  kernel::binary_same<T><<<blocks_for(n), kThreads, 0, s>>>(k, n, a, b, out);
  STRATA_CUDA_CHECK_LAUNCH("binary_same");
}

/// out[o] = a[ia] (kind) b[ib], the offsets given by `ix` (out's strides first).
template <class T>
void binary_broadcast(math::BinaryKind k, const T* a, const T* b, T* out, const StridedIndex& ix, std::int64_t n,
                      cudaStream_t s) {
  if (n == 0) return;
  kernel::binary_broadcast<T><<<blocks_for(n), kThreads, 0, s>>>(k, n, a, b, out, ix);
  STRATA_CUDA_CHECK_LAUNCH("binary_broadcast");
}

/// d (+)= the gradient of a (kind) b with respect to operand `which` (0: a, 1: b).
template <class T>
void binary_backward(math::BinaryKind k, int which, std::int64_t n, const T* g, const T* a, const T* b, T* d,
                     bool accumulate, cudaStream_t s) {
  if (n == 0) return;
  kernel::binary_backward<T><<<blocks_for(n), kThreads, 0, s>>>(k, which, n, g, a, b, d, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("binary_backward");
}

/// d[0, n) (+)= scale * g[0], g one element of device memory.
template <class T>
void spread_scalar(std::int64_t n, const T* g, T scale, T* d, bool accumulate, cudaStream_t s) {
  if (n == 0) return;
  kernel::spread_scalar<T><<<blocks_for(n), kThreads, 0, s>>>(n, g, scale, d, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("spread_scalar");
}

/// dst = act(src + bias[channel]) over images x channels x plane (NCHW; bias may be null).
template <class T>
void channel_bias_act(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* src, const T* bias,
                      bool relu, T* dst, cudaStream_t s) {
  const std::int64_t n = images * channels * plane;
  if (n == 0) return;
  kernel::channel_bias_act<T><<<blocks_for(n), kThreads, 0, s>>>(n, channels, plane, src, bias, relu, dst);
  STRATA_CUDA_CHECK_LAUNCH("channel_bias_act");
}

/// y = f(x) for the unary function `k` (s: the scalar of the scalar forms).
template <class T>
void unary(std::int64_t k, std::int64_t n, const T* x, T scalar, T* y, cudaStream_t s) {
  if (n == 0) return;
  kernel::unary<T><<<blocks_for(n), kThreads, 0, s>>>(k, n, x, scalar, y);
  STRATA_CUDA_CHECK_LAUNCH("unary");
}

/// d (+)= g * f'(x), with y = f(x).
template <class T>
void unary_backward(std::int64_t k, std::int64_t n, const T* g, const T* x, const T* y, T scalar, T* d,
                    bool accumulate, cudaStream_t s) {
  if (n == 0) return;
  kernel::unary_backward<T><<<blocks_for(n), kThreads, 0, s>>>(k, n, g, x, y, scalar, d, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("unary_backward");
}

/// dst = act(src + bias) over a contiguous rows x cols block; bias (cols values) may be null.
template <class T>
void bias_act_rows(std::int64_t rows, std::int64_t cols, const T* src, const T* bias, bool relu, T* dst,
                   cudaStream_t s) {
  if (rows * cols == 0) return;
  kernel::bias_act_rows<T><<<blocks_for(rows * cols), kThreads, 0, s>>>(rows, cols, src, bias, relu, dst);
  STRATA_CUDA_CHECK_LAUNCH("bias_act_rows");
}

}  // namespace strata::kernels::cuda

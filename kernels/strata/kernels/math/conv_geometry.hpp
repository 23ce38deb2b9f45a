/// \file
/// ConvGeometry: the shape of a 2-D convolution over NCHW tensors, taken by the CPU im2col
/// kernels (kernels/cpu/conv.hpp) and the cuDNN ones (kernels/cuda/conv_cudnn.hpp).
#pragma once

#include <cstdint>

namespace strata::kernels::math {

/// Geometry of a 2-D convolution.
struct ConvGeometry {
  std::int64_t n, c, h, w;      // input
  std::int64_t kh, kw;          // kernel
  std::int64_t stride, pad;
  std::int64_t oh() const noexcept { return (h + 2 * pad - kh) / stride + 1; }
  std::int64_t ow() const noexcept { return (w + 2 * pad - kw) / stride + 1; }
  std::int64_t rows() const noexcept { return c * kh * kw; }
  std::int64_t cols() const noexcept { return n * oh() * ow(); }
};

}  // namespace strata::kernels::math

/// \file
/// Iteration over several tensors that share one (broadcast) shape but have their own
/// strides; the innermost axis runs as a tight loop.
#pragma once

#include <array>
#include <cstdint>

#include <strata/tensor/tensor.hpp>  // Tensor, Shape

namespace strata::detail {

/// `t`'s strides seen through the broadcast shape `out` (0 along broadcast axes).
inline Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out) {
  Shape st = out;
  const int off = out.ndim() - shape.ndim();
  for (int i = 0; i < out.ndim(); ++i) {
    const int j = i - off;
    st[i] = (j < 0 || shape[j] == 1) ? 0 : strides[j];
  }
  return st;
}
inline Shape broadcast_strides(const Tensor& t, const Shape& out) {
  return broadcast_strides(t.shape(), t.strides(), out);
}

/// Calls f(offsets) for every index of `shape`, where offsets[k] is the element offset into
/// operand k (strides[k] in elements).
template <std::size_t K, class F>
void for_each_strided(const Shape& shape, const std::array<Shape, K>& strides, F&& f) {
  const int nd = shape.ndim();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    std::array<std::int64_t, K> o{};
    f(o);
    return;
  }
  const std::int64_t inner = shape[nd - 1];
  std::array<std::int64_t, K> inner_stride{};
  for (std::size_t k = 0; k < K; ++k) inner_stride[k] = strides[k][nd - 1];
  std::array<std::int64_t, kMaxDims> idx{};
  std::array<std::int64_t, K> base{};
  const std::int64_t outer = shape.numel() / inner;
  for (std::int64_t r = 0; r < outer; ++r) {
    std::array<std::int64_t, K> o = base;
    for (std::int64_t j = 0; j < inner; ++j) {
      f(o);
      for (std::size_t k = 0; k < K; ++k) o[k] += inner_stride[k];
    }
    for (int d = nd - 2; d >= 0; --d) {
      const auto ud = static_cast<std::size_t>(d);
      if (++idx[ud] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) base[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) base[k] -= strides[k][d] * (shape[d] - 1);
      idx[ud] = 0;
    }
  }
}

}  // namespace strata::detail

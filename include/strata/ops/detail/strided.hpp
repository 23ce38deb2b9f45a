/// \file
/// Iteration over several tensors that share one (broadcast) shape but have their own
/// strides; the innermost axis runs as a tight loop.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>  // std::integral_constant

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

/// Calls f(offsets, n, inner) for each run of the innermost axis of `shape`: offsets[k] is the
/// element offset of the run's first element in operand k, n the run's length and inner[k]
/// operand k's stride along it. The caller's loop over a run is then a tight one, which the
/// compiler vectorises where the strides are known (with_unit_stride).
template <std::size_t K, class F>
void for_each_row(const Shape& shape, const std::array<Shape, K>& strides, F&& f) {
  const int nd = shape.ndim();
  if (shape.numel() == 0) return;
  std::array<std::int64_t, K> inner{};
  if (nd == 0) {
    f(std::array<std::int64_t, K>{}, std::int64_t{1}, inner);
    return;
  }
  const std::int64_t n = shape[nd - 1];
  for (std::size_t k = 0; k < K; ++k) inner[k] = strides[k][nd - 1];
  std::array<std::int64_t, kMaxDims> idx{};
  std::array<std::int64_t, K> base{};
  const std::int64_t outer = shape.numel() / n;
  for (std::int64_t r = 0; r < outer; ++r) {
    f(base, n, inner);
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

/// Calls f(offsets) for every index of `shape`, where offsets[k] is the element offset into
/// operand k (strides[k] in elements).
template <std::size_t K, class F>
void for_each_strided(const Shape& shape, const std::array<Shape, K>& strides, F&& f) {
  for_each_row<K>(shape, strides, [&](const std::array<std::int64_t, K>& first, std::int64_t n,
                                      const std::array<std::int64_t, K>& inner) {
    std::array<std::int64_t, K> o = first;
    for (std::int64_t j = 0; j < n; ++j) {
      f(o);
      for (std::size_t k = 0; k < K; ++k) o[k] += inner[k];
    }
  });
}

/// f(std::integral_constant<int, S>{}) with S = `stride` where it is 0 or 1 (known to the
/// compiler), else S = -1: element j of the run is then at(j, S, stride).
template <class F>
decltype(auto) with_unit_stride(std::int64_t stride, F&& f) {
  if (stride == 1) return f(std::integral_constant<int, 1>{});
  if (stride == 0) return f(std::integral_constant<int, 0>{});
  return f(std::integral_constant<int, -1>{});
}
/// The offset of element j of a run whose stride is S (0 or 1), or `stride` (S = -1).
template <int S>
constexpr std::int64_t at(std::int64_t j, std::integral_constant<int, S>, std::int64_t stride) noexcept {
  if constexpr (S < 0)
    return j * stride;
  else
    return j * S;
}

}  // namespace strata::detail

/// \file
/// vecdot: inner products along the last axis, broadcasting the others
/// (torch.linalg.vecdot): sum(a * b, {-1}) in one pass, with no [..., D] product in between,
/// forward or backward. Scores of a vector against several (a word against its context and
/// noise words, a query against keys) are its usual use.
#pragma once

#include <algorithm>
#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/vecdot.hpp>
#include <strata/ops/detail/strided.hpp>  // broadcast_strides, for_each_strided
#include <strata/ops/elementwise.hpp>     // the device path: mul
#include <strata/ops/reduce.hpp>          // the device path: sum
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

/// `s` without its last axis.
inline Shape leading_axes(const Shape& s) { return Shape(s.dims().first(static_cast<std::size_t>(s.ndim() - 1))); }

/// The leading axes (all but the last) of contiguous `t`, with their strides seen through
/// the broadcast leading shape `out`.
inline Shape vecdot_strides(const Tensor& t, const Shape& out) {
  return strata::detail::broadcast_strides(leading_axes(t.shape()), leading_axes(contiguous_strides(t.shape())), out);
}

inline void vecdot_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &a = n.saved[0], &b = n.saved[1];  // contiguous
  const Shape& os = g.shape();
  const std::int64_t D = a.dim(-1);
  const std::array<Shape, 2> st{vecdot_strides(a, os), vecdot_strides(b, os)};
  strata::detail::visit_floating(g.dtype(), "vecdot", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.template data<T>();
    // d(a row) = g * (its b row), and alike for b; a broadcast row sums its outputs' terms.
    auto add = [&](int k, const Tensor& mine, const Tensor& other, autograd::GradSlot& s) {
      const bool sums = s.accumulate || !(leading_axes(mine.shape()) == os);
      if (!s.accumulate && sums) s.dst.fill_(0.0);
      T* d = s.dst.template data<T>();
      const T* o = other.template data<T>();
      std::int64_t i = 0;
      strata::detail::for_each_strided<2>(os, st, [&](const auto& at) {
        if (sums)
          kernels::cpu::axpy<T>(D, gp[i++], o + at[1 - k], d + at[k]);
        else
          kernels::cpu::scale<T>(D, gp[i++], o + at[1 - k], d + at[k]);
      });
    };
    if (auto s = autograd::grad_slot(n.in[0], epoch)) add(0, a, b, s);
    if (auto s = autograd::grad_slot(n.in[1], epoch)) add(1, b, a, s);
  });
}

}  // namespace ops::detail

/// Σ_d a[..., d] b[..., d]: the inner products of the rows of `a` and `b` along their last
/// axis (equal extents), the other axes broadcast as in a * b; the result has the broadcast
/// shape without the last axis. sum(a * b, {-1}) in one pass.
///
/// @code
/// Tensor scores = strata::vecdot(others, center);  // [B, K, D] . [B, 1, D] -> [B, K]
/// @endcode
inline Tensor vecdot(const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.defined() && b.defined(), "vecdot: undefined operand");
  STRATA_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "vecdot needs operands of at least 1 axis, got ", a.shape(), " and ",
               b.shape());
  STRATA_CHECK(a.dim(-1) == b.dim(-1), "vecdot: last extents differ: ", a.shape(), " . ", b.shape());
  STRATA_CHECK(a.dtype() == b.dtype(), "vecdot: dtypes differ (", a.dtype(), " vs ", b.dtype(), ")");
  if (on_device(a) || on_device(b)) {  // composed where the device has its siblings
    const int last = std::max(a.ndim(), b.ndim()) - 1;
    return sum(mul(a, b), {last});
  }
  const Shape os = broadcast_shapes(ops::detail::leading_axes(a.shape()), ops::detail::leading_axes(b.shape()));
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(os, a.dtype(), a.device());
  const std::int64_t D = a.dim(-1);
  const std::array<Shape, 2> st{ops::detail::vecdot_strides(ac, os), ops::detail::vecdot_strides(bc, os)};
  strata::detail::visit_floating(a.dtype(), "vecdot", [&](auto tag) {
    using T = decltype(tag);
    const T *x = ac.template data<T>(), *y = bc.template data<T>();
    T* o = out.template data<T>();
    std::int64_t i = 0;
    strata::detail::for_each_strided<2>(os, st, [&](const auto& at) { o[i++] = kernels::cpu::dot<T>(D, x + at[0], y + at[1]); });
  });
  if (auto* n = autograd::record("vecdot", &ops::detail::vecdot_backward, out, a, b)) n->saved = {ac, bc};
  return out;
}

}  // namespace strata

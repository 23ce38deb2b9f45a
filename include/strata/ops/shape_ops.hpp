/// \file
/// Differentiable shape operations that share storage: reshape, flatten, and the strided
/// views transpose and permute.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/math/binary.hpp>
#include <strata/ops/detail/strided.hpp>  // for_each_strided
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

inline void reshape_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  // The same elements in the same order: the gradient itself, viewed in the input's shape.
  if (g.is_contiguous() &&
      autograd::pass_gradient(n.in[0], strata::detail::make_view(g, n.in[0].shape(), contiguous_strides(n.in[0].shape()),
                                                                 g.impl()->offset()),
                              epoch))
    return;
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  if (on_device(g)) {  // the same elements in the same order: a copy, or an add
    const auto& dk = device_kernels("reshape", g, s.dst);
    if (s.accumulate)
      dk.binary(g.device().index, g.dtype(), kernels::math::BinaryKind::add, g.numel(), s.dst.raw_data(), g.raw_data(),
                s.dst.raw_data());
    else
      backend_of(g.device()).copy(s.dst.raw_data(), g.device(), g.raw_data(), g.device(), g.nbytes());
    return;
  }
  strata::detail::visit_floating(g.dtype(), "reshape", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.template data<T>();
    T* d = s.dst.template data<T>();
    const std::int64_t cnt = g.numel();
    if (s.accumulate)
      for (std::int64_t i = 0; i < cnt; ++i) d[i] += gp[i];
    else
      for (std::int64_t i = 0; i < cnt; ++i) d[i] = gp[i];
  });
}

/// d (+)= src read through `src_strides` (element strides over d's shape), on the host or
/// the device: the inverse permutation of a permuted view's gradient.
inline void write_strided(const autograd::GradSlot& s, const Tensor& src, const Shape& src_strides) {
  const Shape& shape = s.dst.shape();
  if (on_device(src)) {
    Tensor gathered = strata::detail::make_view(src, shape, src_strides, src.impl()->offset()).contiguous();
    const auto& dk = device_kernels("permute", src, s.dst);
    if (s.accumulate)
      dk.binary(src.device().index, src.dtype(), kernels::math::BinaryKind::add, shape.numel(), s.dst.raw_data(),
                gathered.raw_data(), s.dst.raw_data());
    else
      backend_of(src.device()).copy(s.dst.raw_data(), src.device(), gathered.raw_data(), src.device(), s.dst.nbytes());
    return;
  }
  strata::detail::visit_floating(src.dtype(), "permute", [&](auto tag) {
    using T = decltype(tag);
    const T* g = src.template data<T>();
    T* d = s.dst.template data<T>();
    const std::array<Shape, 2> st{contiguous_strides(shape), src_strides};
    if (s.accumulate)
      strata::detail::for_each_strided<2>(shape, st, [&](const auto& o) { d[o[0]] += g[o[1]]; });
    else
      strata::detail::for_each_strided<2>(shape, st, [&](const auto& o) { d[o[0]] = g[o[1]]; });
  });
}

/// Output axis i of a permute is input axis n.i[i]; the gradient (contiguous, output-shaped)
/// read with its strides moved back to the input's axes is the input's gradient.
inline void permute_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor& g = autograd::grad_output(n);
  const Shape gs = contiguous_strides(g.shape());
  Shape back = n.in[0].shape();
  for (int i = 0; i < g.ndim(); ++i) back[static_cast<int>(n.i[static_cast<std::size_t>(i)])] = gs[i];
  write_strided(s, g, back);
}

}  // namespace ops::detail

/// A view of `x` with its axes reordered: output axis i is input axis dims[i] (negative
/// counts from the end). Shares storage; no element is copied.
inline Tensor permute(const Tensor& x, std::initializer_list<int> dims) {
  STRATA_CHECK(x.defined(), "permute of an undefined tensor");
  STRATA_CHECK(static_cast<int>(dims.size()) == x.ndim(), "permute: ", dims.size(), " axes given for a tensor of ",
               x.ndim(), " dimensions ", x.shape());
  Shape shape, strides;
  std::array<std::int64_t, kMaxDims> axes{};
  std::uint32_t seen = 0;
  int i = 0;
  for (int d : dims) {
    const int a = x.shape().normalize_axis(d);
    STRATA_CHECK(!(seen & (1u << a)), "permute: axis ", d, " given twice");
    seen |= 1u << a;
    shape.push_back(x.dim(a));
    strides.push_back(x.strides()[a]);
    axes[static_cast<std::size_t>(i++)] = a;
  }
  Tensor out = strata::detail::make_view(x, shape, strides, x.impl()->offset());
  if (auto* n = autograd::record("permute", &ops::detail::permute_backward, out, x))
    for (std::size_t k = 0; k < axes.size(); ++k) n->i[k] = axes[k];
  return out;
}

/// A view of `x` with axes `a` and `b` swapped (negative counts from the end).
inline Tensor transpose(const Tensor& x, int a, int b) {
  STRATA_CHECK(x.defined(), "transpose of an undefined tensor");
  const int na = x.shape().normalize_axis(a), nb = x.shape().normalize_axis(b);
  Shape shape = x.shape(), strides = x.strides();
  std::swap(shape[na], shape[nb]);
  std::swap(strides[na], strides[nb]);
  Tensor out = strata::detail::make_view(x, shape, strides, x.impl()->offset());
  if (auto* n = autograd::record("transpose", &ops::detail::permute_backward, out, x)) {
    for (int k = 0; k < x.ndim(); ++k) n->i[static_cast<std::size_t>(k)] = k;
    std::swap(n->i[static_cast<std::size_t>(na)], n->i[static_cast<std::size_t>(nb)]);
  }
  return out;
}

/// The same elements with another shape; one extent may be -1 (inferred). Shares storage
/// with `x` when `x` is contiguous.
inline Tensor reshape(const Tensor& x, std::span<const std::int64_t> dims) {
  STRATA_CHECK(x.defined(), "reshape of an undefined tensor");
  Shape s;
  std::int64_t known = 1;
  int infer = -1;
  for (std::int64_t d : dims) {
    if (d == -1) {
      STRATA_CHECK(infer < 0, "reshape: at most one extent may be -1");
      infer = s.ndim();
      s.push_back(1);
    } else {
      STRATA_CHECK(d >= 0, "reshape: negative extent ", d);
      s.push_back(d);
      known *= d;
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot infer -1 reshaping ", x.shape());
    s[infer] = x.numel() / known;
  }
  STRATA_CHECK_EQ(s.numel(), x.numel(), "reshape from ", x.shape(), " to ", s);
  Tensor c = x.contiguous();
  Tensor out = strata::detail::make_view(c, s, contiguous_strides(s), c.impl()->offset());
  autograd::record("reshape", &ops::detail::reshape_backward, out, x);
  return out;
}
inline Tensor reshape(const Tensor& x, std::initializer_list<std::int64_t> dims) {
  return reshape(x, std::span<const std::int64_t>(dims.begin(), dims.size()));
}
inline Tensor reshape(const Tensor& x, const Shape& shape) { return reshape(x, shape.dims()); }

/// Keeps axis 0 and flattens the rest: [N, ...] -> [N, prod(...)].
inline Tensor flatten(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1, "flatten needs at least one axis");
  std::int64_t rest = 1;  // explicit, not -1: an empty batch [0, ...] has no extent to infer from
  for (int i = 1; i < x.ndim(); ++i) rest *= x.dim(i);
  return reshape(x, {x.dim(0), rest});
}

}  // namespace strata

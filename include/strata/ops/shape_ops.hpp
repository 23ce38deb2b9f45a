/// \file
/// Differentiable shape operations that share storage: reshape and flatten.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/math/binary.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

inline void reshape_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor& g = autograd::grad_output(n);
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

}  // namespace ops::detail

/// The same elements with another shape; one extent may be -1 (inferred). Shares storage
/// with `x` when `x` is contiguous.
inline Tensor reshape(const Tensor& x, std::initializer_list<std::int64_t> dims) {
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

/// Keeps axis 0 and flattens the rest: [N, ...] -> [N, prod(...)].
inline Tensor flatten(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1, "flatten needs at least one axis");
  std::int64_t rest = 1;  // explicit, not -1: an empty batch [0, ...] has no extent to infer from
  for (int i = 1; i < x.ndim(); ++i) rest *= x.dim(i);
  return reshape(x, {x.dim(0), rest});
}

}  // namespace strata

/// \file
/// Differentiable softmax along an axis, and the scaled, causally masked row softmax that
/// attention runs on its scores in one pass.
#pragma once

#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/softmax.hpp>    // softmax_forward/backward
#include <strata/ops/shape_ops.hpp>          // transpose: a softmax along another axis
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

inline void softmax_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const std::int64_t cols = n.out.dim(-1), rows = n.out.numel() / (cols > 0 ? cols : 1);
  if (on_device(n.out)) {
    const Tensor& g = autograd::grad_output(n);
    device_kernels("softmax", g, s.dst)
        .softmax_backward(g.device().index, g.dtype(), rows, cols, n.out.raw_data(), g.raw_data(), n.f[0],
                          s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::softmax_backward<T>(rows, cols, n.out.template data<T>(),
                                      autograd::grad_output(n).template data<T>(), static_cast<T>(n.f[0]),
                                      s.dst.template data<T>(), s.accumulate);
  });
}

/// softmax(scale * x) over the last axis; `causal_period` > 0 masks as causal_visible says
/// (the rows being queries of that many per matrix: attention's [..., Tq, Tk] scores).
inline Tensor scaled_softmax(const Tensor& x, double scale, std::int64_t causal_period) {
  STRATA_CHECK(x.defined() && x.ndim() >= 1, "softmax of an undefined or 0-d tensor");
  STRATA_CHECK(scale > 0, "softmax: scale must be positive, got ", scale);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const std::int64_t cols = x.dim(-1), rows = x.numel() / (cols > 0 ? cols : 1);
  if (on_device(x))
    device_kernels("softmax", x).softmax_forward(x.device().index, x.dtype(), rows, cols, xc.raw_data(),
                                                 out.raw_data(), scale, causal_period);
  else
    strata::detail::visit_floating(x.dtype(), "softmax", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::softmax_forward<T>(rows, cols, xc.template data<T>(), out.template data<T>(),
                                       static_cast<T>(scale), causal_period);
    });
  if (auto* n = autograd::record("softmax", &softmax_backward, out, x)) n->f[0] = scale;
  return out;
}

}  // namespace ops::detail

/// exp(x) / sum(exp(x)) along `axis` (negative counts from the end), stable for any magnitude.
inline Tensor softmax(const Tensor& x, int axis = -1) {
  STRATA_CHECK(x.defined() && x.ndim() >= 1, "softmax of an undefined or 0-d tensor");
  const int a = x.shape().normalize_axis(axis);
  if (a == x.ndim() - 1) return ops::detail::scaled_softmax(x, 1.0, 0);
  return transpose(ops::detail::scaled_softmax(transpose(x, a, -1), 1.0, 0), a, -1);
}

}  // namespace strata

/// \file
/// Differentiable elementwise operations: binary arithmetic with NumPy broadcasting, scalar
/// arithmetic, and unary functions (relu, exp, log, tanh, sigmoid, gelu).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>  // std::integral_constant

#include <strata/autograd/tape.hpp>     // record, grad_slot
#include <strata/kernels/cpu/elementwise.hpp>  // relu passes
#include <strata/kernels/cpu/fast_math.hpp>    // gelu passes
#include <strata/kernels/math/binary.hpp>
#include <strata/kernels/math/unary.hpp>
#include <strata/ops/detail/strided.hpp>  // for_each_strided
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

using autograd::GradSlot;
using autograd::Node;

using kernels::math::BinaryKind;

/// f(std::integral_constant<BinaryKind, kind>{}): the kind known to the compiler in f's loops.
template <class F>
decltype(auto) with_binary_kind(BinaryKind kind, F&& f) {
  switch (kind) {
    case BinaryKind::add: return f(std::integral_constant<BinaryKind, BinaryKind::add>{});
    case BinaryKind::sub: return f(std::integral_constant<BinaryKind, BinaryKind::sub>{});
    case BinaryKind::mul: return f(std::integral_constant<BinaryKind, BinaryKind::mul>{});
    case BinaryKind::div: break;
  }
  return f(std::integral_constant<BinaryKind, BinaryKind::div>{});
}

/// The gradient of operand `Which` (0: a, 1: b) of a broadcasting a (kind) b on the host,
/// written into `slot` and summed over the axes along which that operand was broadcast;
/// `st` holds the strides of the output's gradient, a and b over the output's shape. Run by
/// run of the innermost axis, each a loop the compiler vectorises where the strides are 0 or 1.
template <class T, int Which, BinaryKind Kind>
void broadcast_operand_grad(GradSlot& slot, const Shape& os, const std::array<Shape, 3>& st, const T* gp, const T* ap,
                            const T* bp) {
  using strata::detail::at;
  T* d = slot.dst.template data<T>();
  const Shape& ds = slot.dst.shape();
  const bool whole = ds == os;  // no reduction
  if (!whole && !slot.accumulate) slot.dst.fill_(0.0);
  const bool overwrite = whole && !slot.accumulate;
  const std::array<Shape, 4> st4{st[0], st[1], st[2],
                                 whole ? contiguous_strides(os)
                                       : strata::detail::broadcast_strides(ds, contiguous_strides(ds), os)};
  strata::detail::for_each_row<4>(os, st4, [&](const auto& o, std::int64_t n, const auto& in) {
    const T* g = gp + o[0];  // the output's gradient is contiguous: stride 1
    const T* a = ap + o[1];
    const T* b = bp + o[2];
    T* y = d + o[3];
    strata::detail::with_unit_stride(in[1], [&](auto sa) {
      strata::detail::with_unit_stride(in[2], [&](auto sb) {
        const auto v = [&](std::int64_t j) {
          if constexpr (Which == 0)
            return kernels::math::binary_grad_a(Kind, g[j], b[at(j, sb, in[2])]);
          else
            return kernels::math::binary_grad_b(Kind, g[j], a[at(j, sa, in[1])], b[at(j, sb, in[2])]);
        };
        if (in[3] == 0) {  // summed along the run, in order (a 0-d operand's run of one: overwritten)
          T acc = overwrite ? T(0) : y[0];
          for (std::int64_t j = 0; j < n; ++j) acc += v(j);
          y[0] = acc;
        } else if (overwrite) {
          for (std::int64_t j = 0; j < n; ++j) y[j] = v(j);
        } else {
          for (std::int64_t j = 0; j < n; ++j) y[j] += v(j);
        }
      });
    });
  });
}

/// s.dst (+)= `d` (the output's shape) summed down to s.dst's shape on a device, as one GEMM
/// with a vector of ones: over the leading axes ([outer, inner] -> [inner]) or the trailing
/// ones ([outer, inner] -> [outer]). Other broadcasts (axes in the middle) are an error.
inline void device_reduce_broadcast(const char* op, const Tensor& d, const autograd::GradSlot& s) {
  const Shape& os = d.shape();
  Shape ps;  // s.dst's shape aligned to the right, as broadcasting reads it
  for (int i = s.dst.ndim(); i < os.ndim(); ++i) ps.push_back(1);
  for (std::int64_t e : s.dst.shape().dims()) ps.push_back(e);
  const int r = os.ndim();
  int lead = 0, trail = r;  // ps == [1.., os[lead:]] or ps == [os[:trail], 1..]
  while (lead < r && ps[lead] == 1) ++lead;
  while (trail > 0 && ps[trail - 1] == 1) --trail;
  bool leading = true, trailing = true;
  for (int i = lead; i < r; ++i) leading = leading && ps[i] == os[i];
  for (int i = 0; i < trail; ++i) trailing = trailing && ps[i] == os[i];
  if (!leading && !trailing)
    unsupported_on_device(op, d.device(), "the gradient of an operand broadcast along middle axes is not computed "
                                          "on devices; broadcast it first (one shape for both operands)");
  const std::int64_t kept = s.dst.numel(), summed = kept > 0 ? os.numel() / kept : 0;
  Tensor ones_vec = Tensor::empty({summed}, d.dtype(), d.device());
  ones_vec.fill_(1.0);
  const auto& dk = device_kernels(op, d, s.dst);
  if (leading)  // [1, summed] x [summed, kept]
    dk.gemm(d.device().index, d.dtype(), false, false, 1, kept, summed, ones_vec.raw_data(), summed, d.raw_data(), kept,
            s.dst.raw_data(), kept, s.accumulate);
  else  // [kept, summed] x [summed, 1]
    dk.gemm(d.device().index, d.dtype(), false, false, kept, 1, summed, d.raw_data(), summed, ones_vec.raw_data(), 1,
            s.dst.raw_data(), 1, s.accumulate);
}

inline void binary_backward(Node& n, std::uint64_t epoch) {
  const Tensor g = autograd::grad_output(n);  // (held: it may be handed on to a below)
  const Tensor &a = n.in[0], &b = n.in[1];
  const auto kind = static_cast<BinaryKind>(n.i[0]);
  const Shape& os = n.out.shape();
  // a + b and a - b: a's gradient is the output's, handed on (a residual connection's
  // backward then copies once, for b, not twice). Not when a and b are one tensor.
  bool a_done = (kind == BinaryKind::add || kind == BinaryKind::sub) && !same_tensor(a, b) &&
                autograd::pass_gradient(a, g, epoch);
  if (on_device(g)) {
    const auto& dk = device_kernels(n.name, g, a, b);
    // A broadcast operand is read at the output's shape (a contiguous copy); its gradient is
    // made at that shape, then summed over the broadcast axes (device_reduce_broadcast).
    const auto full = [&](const Tensor& t) {
      return t.shape() == os ? t.contiguous()
                             : strata::detail::make_view(t, os, strata::detail::broadcast_strides(t, os),
                                                         t.impl()->offset())
                                   .contiguous();
    };
    const Tensor ac = full(a), bc = full(b);
    for (int which = a_done ? 1 : 0; which < 2; ++which) {
      const Tensor& operand = which == 0 ? a : b;
      auto s = autograd::grad_slot(operand, epoch);
      if (!s) continue;
      if (operand.shape() == os) {
        dk.binary_backward(g.device().index, g.dtype(), kind, which, g.numel(), g.raw_data(), ac.raw_data(),
                           bc.raw_data(), s.dst.raw_data(), s.accumulate);
        continue;
      }
      Tensor d = Tensor::empty(os, g.dtype(), g.device());
      dk.binary_backward(g.device().index, g.dtype(), kind, which, g.numel(), g.raw_data(), ac.raw_data(),
                         bc.raw_data(), d.raw_data(), false);
      device_reduce_broadcast(n.name, d, s);
    }
    return;
  }
  strata::detail::visit_floating(g.dtype(), n.name, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    const std::array<Shape, 3> st{contiguous_strides(os), strata::detail::broadcast_strides(a, os),
                                  strata::detail::broadcast_strides(b, os)};
    if (auto s = a_done ? autograd::GradSlot{} : autograd::grad_slot(a, epoch))
      with_binary_kind(kind, [&](auto k) { broadcast_operand_grad<T, 0, decltype(k)::value>(s, os, st, gp, ap, bp); });
    if (auto s = autograd::grad_slot(b, epoch)) {
      if (kind == BinaryKind::add && s.dst.shape() == os) {  // the same values again: one vectorised pass
        kernels::cpu::copy_or_add<T>(g.numel(), gp, s.dst.template data<T>(), s.accumulate);
        return;
      }
      with_binary_kind(kind, [&](auto k) { broadcast_operand_grad<T, 1, decltype(k)::value>(s, os, st, gp, ap, bp); });
    }
  });
}

inline Tensor binary(const char* name, BinaryKind kind, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.defined() && b.defined(), name, ": undefined operand");
  STRATA_CHECK(a.dtype() == b.dtype(), name, ": dtypes differ (", a.dtype(), " vs ", b.dtype(), ")");
  const Shape os = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(os, a.dtype(), a.device());
  if (on_device(a)) {
    const auto& dk = device_kernels(name, a, b);
    if (a.shape() == os && b.shape() == os && a.is_contiguous() && b.is_contiguous())
      dk.binary(a.device().index, a.dtype(), kind, out.numel(), a.raw_data(), b.raw_data(), out.raw_data());
    else
      dk.binary_broadcast(a.device().index, a.dtype(), kind, os, strata::detail::broadcast_strides(a, os),
                          strata::detail::broadcast_strides(b, os), a.raw_data(), b.raw_data(), out.raw_data());
  } else {
    strata::detail::visit_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* ap = static_cast<const T*>(a.raw_data());
      const T* bp = static_cast<const T*>(b.raw_data());
      T* op = static_cast<T*>(out.raw_data());
      const std::int64_t n = out.numel();
      if (a.shape() == os && b.shape() == os && a.is_contiguous() && b.is_contiguous()) {
        switch (kind) {  // the common case, kept free of per-element dispatch so it vectorises
          case BinaryKind::add: for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i]; break;
          case BinaryKind::sub: for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i] - bp[i]; break;
          case BinaryKind::mul: for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i] * bp[i]; break;
          case BinaryKind::div: for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i] / bp[i]; break;
        }
        return;
      }
      const std::array<Shape, 3> st{contiguous_strides(os), strata::detail::broadcast_strides(a, os),
                                    strata::detail::broadcast_strides(b, os)};
      with_binary_kind(kind, [&](auto k) {  // run by run, the kind and the unit strides known in the loop
        strata::detail::for_each_row<3>(os, st, [&](const auto& o, std::int64_t len, const auto& in) {
          T* y = op + o[0];
          const T* x = ap + o[1];
          const T* z = bp + o[2];
          strata::detail::with_unit_stride(in[1], [&](auto sx) {
            strata::detail::with_unit_stride(in[2], [&](auto sz) {
              using strata::detail::at;
              for (std::int64_t j = 0; j < len; ++j)
                y[j] = kernels::math::binary(decltype(k)::value, x[at(j, sx, in[1])], z[at(j, sz, in[2])]);
            });
          });
        });
      });
    });
  }
  if (is_floating(a.dtype())) {
    if (Node* node = autograd::record(name, &binary_backward, out, a, b)) node->i[0] = static_cast<std::int64_t>(kind);
  }
  return out;
}

/// The unary functions (their math is shared with the CUDA kernels).
using UnaryOp = kernels::math::Unary;

inline void unary_backward(Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const std::int64_t k = n.i[0];
  if (on_device(n.out)) {
    const Tensor& g = autograd::grad_output(n);
    device_kernels(n.name, n.out, g).unary_backward(n.out.device().index, n.out.dtype(), k, n.out.numel(),
                                                     g.raw_data(), n.saved[0].raw_data(), n.out.raw_data(), n.f[0],
                                                     s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), n.name, [&](auto tag) {
    using T = decltype(tag);
    const T* g = autograd::grad_output(n).template data<T>();
    const T* x = n.saved[0].template data<T>();
    const T* y = n.out.template data<T>();
    T* d = s.dst.template data<T>();
    const T sc = static_cast<T>(n.f[0]);
    const std::int64_t cnt = n.out.numel();
    if (k == UnaryOp::relu) {  // hot in every network: a vectorised pass
      kernels::cpu::relu_backward<T>(cnt, y, g, d, s.accumulate);
      return;
    }
    if (k == UnaryOp::gelu) {  // a Transformer's MLP: vectorised, no std::erf call per value
      kernels::cpu::gelu_backward<T>(cnt, x, y, g, d, s.accumulate);
      return;
    }
    for (std::int64_t i = 0; i < cnt; ++i) {
      const T v = g[i] * kernels::math::unary_dydx<T>(k, x[i], y[i], sc);
      d[i] = s.accumulate ? d[i] + v : v;
    }
  });
}

inline Tensor unary(const char* name, std::int64_t kind, const Tensor& x, double scalar = 0) {
  STRATA_CHECK(x.defined(), name, ": undefined operand");
  Tensor in = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (on_device(x)) {
    device_kernels(name, x).unary(x.device().index, x.dtype(), kind, x.numel(), in.raw_data(), scalar, out.raw_data());
  } else {
    strata::detail::visit_floating(x.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      const T* p = in.data<T>();
      T* o = out.data<T>();
      const T s = static_cast<T>(scalar);
      const std::int64_t n = out.numel();
      if (kind == UnaryOp::relu)
        kernels::cpu::bias_act_rows<T>(1, n, p, n, nullptr, true, o, n);
      else if (kind == UnaryOp::gelu)
        kernels::cpu::gelu_forward<T>(n, p, o);
      else
        for (std::int64_t i = 0; i < n; ++i) o[i] = kernels::math::unary_fwd<T>(kind, p[i], s);
    });
  }
  if (Node* node = autograd::record(name, &unary_backward, out, x)) {
    node->i[0] = kind;
    node->f[0] = scalar;
    node->saved[0] = in;
  }
  return out;
}

}  // namespace ops::detail

/// a + b, broadcasting.
inline Tensor add(const Tensor& a, const Tensor& b) { return ops::detail::binary("add", ops::detail::BinaryKind::add, a, b); }
/// a - b, broadcasting.
inline Tensor sub(const Tensor& a, const Tensor& b) { return ops::detail::binary("sub", ops::detail::BinaryKind::sub, a, b); }
/// a * b (elementwise), broadcasting.
inline Tensor mul(const Tensor& a, const Tensor& b) { return ops::detail::binary("mul", ops::detail::BinaryKind::mul, a, b); }
/// a / b (elementwise), broadcasting.
inline Tensor div(const Tensor& a, const Tensor& b) { return ops::detail::binary("div", ops::detail::BinaryKind::div, a, b); }

inline Tensor neg(const Tensor& x) { return ops::detail::unary("neg", ops::detail::UnaryOp::neg, x); }
/// max(x, 0).
inline Tensor relu(const Tensor& x) { return ops::detail::unary("relu", ops::detail::UnaryOp::relu, x); }
inline Tensor exp(const Tensor& x) { return ops::detail::unary("exp", ops::detail::UnaryOp::exp, x); }
inline Tensor log(const Tensor& x) { return ops::detail::unary("log", ops::detail::UnaryOp::log, x); }
inline Tensor tanh(const Tensor& x) { return ops::detail::unary("tanh", ops::detail::UnaryOp::tanh, x); }
inline Tensor sigmoid(const Tensor& x) { return ops::detail::unary("sigmoid", ops::detail::UnaryOp::sigmoid, x); }
/// x Φ(x), Φ the standard normal CDF (the exact form, PyTorch's default GELU).
inline Tensor gelu(const Tensor& x) { return ops::detail::unary("gelu", ops::detail::UnaryOp::gelu, x); }
/// x + s.
inline Tensor add(const Tensor& x, double s) { return ops::detail::unary("add_scalar", ops::detail::UnaryOp::add_scalar, x, s); }
/// x * s.
inline Tensor mul(const Tensor& x, double s) { return ops::detail::unary("mul_scalar", ops::detail::UnaryOp::mul_scalar, x, s); }
/// x ^ s (elementwise).
inline Tensor pow(const Tensor& x, double s) { return ops::detail::unary("pow_scalar", ops::detail::UnaryOp::pow_scalar, x, s); }

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }

}  // namespace strata

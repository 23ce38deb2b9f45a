/// \file
/// Differentiable matrix products: matmul, and linear (x W^T + b) with an optional fused
/// ReLU, so a Linear+ReLU pair costs one GEMM and one pass over its output.
#pragma once

#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/elementwise.hpp>  // bias_act_inplace, relu_mask_inplace, column_sums
#include <strata/kernels/cpu/gemm.hpp>         // kernels::cpu::gemm
#include <strata/kernels/math/unary.hpp>     // Unary::relu
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

/// An activation that an operation applies to its output in the same pass.
enum class Activation : std::int64_t { none, relu };

namespace ops::detail {

/// C (+)= op(A) op(B) with explicit row strides; `accumulate` adds to C instead of overwriting it.
template <class T>
void gemm_strided(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
                  const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  kernels::cpu::GemmArgs<T> g{ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc};
  kernels::cpu::gemm(g);
}

/// The same on contiguous operands.
template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c, bool accumulate) {
  gemm_strided<T>(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, c, n, accumulate);
}

/// The device path of gemm(): contiguous operands on g's device.
inline void device_gemm(const Tensor& on, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                        const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
  const auto& dk = device_kernels("matmul", on, a, b, c);
  dk.gemm(on.device().index, on.dtype(), ta, tb, m, n, k, a.raw_data(), ta ? m : k, b.raw_data(), tb ? k : n,
          c.raw_data(), n, accumulate);
}

inline void matmul_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &a = n.saved[0], &b = n.saved[1];
  const std::int64_t M = a.dim(0), K = a.dim(1), N = b.dim(1);
  if (on_device(g)) {
    if (auto s = autograd::grad_slot(n.in[0], epoch)) device_gemm(g, false, true, M, K, N, g, b, s.dst, s.accumulate);
    if (auto s = autograd::grad_slot(n.in[1], epoch)) device_gemm(g, true, false, K, N, M, a, g, s.dst, s.accumulate);
    return;
  }
  strata::detail::visit_floating(g.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    if (auto s = autograd::grad_slot(n.in[0], epoch))  // dA = G B^T
      gemm<T>(false, true, M, K, N, g.template data<T>(), b.template data<T>(), s.dst.template data<T>(), s.accumulate);
    if (auto s = autograd::grad_slot(n.in[1], epoch))  // dB = A^T G
      gemm<T>(true, false, K, N, M, a.template data<T>(), g.template data<T>(), s.dst.template data<T>(), s.accumulate);
  });
}

inline void linear_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &x = n.saved[0], &w = n.saved[1];
  const std::int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  if (on_device(g)) {
    const auto& dk = device_kernels("linear", g, x, w);
    const int dev = g.device().index;
    if (static_cast<Activation>(n.i[0]) == Activation::relu)  // g *= (y > 0), in place
      dk.unary_backward(dev, g.dtype(), kernels::math::Unary::relu, N * O, g.raw_data(), n.out.raw_data(),
                        n.out.raw_data(), 0.0, g.raw_data(), false);
    if (auto s = autograd::grad_slot(n.in[1], epoch)) device_gemm(g, true, false, O, I, N, g, x, s.dst, s.accumulate);
    if (auto s = autograd::grad_slot(n.in[2], epoch))
      dk.column_sums(dev, g.dtype(), N, O, g.raw_data(), s.dst.raw_data(), s.accumulate);
    if (auto s = autograd::grad_slot(n.in[0], epoch)) device_gemm(g, false, false, N, I, O, g, w, s.dst, s.accumulate);
    return;
  }
  strata::detail::visit_floating(g.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    T* gp = g.template data<T>();
    if (static_cast<Activation>(n.i[0]) == Activation::relu) kernels::cpu::relu_mask_inplace<T>(N * O, n.out.template data<T>(), gp);
    if (auto s = autograd::grad_slot(n.in[1], epoch))  // dW = G^T X
      gemm<T>(true, false, O, I, N, gp, x.template data<T>(), s.dst.template data<T>(), s.accumulate);
    if (auto s = autograd::grad_slot(n.in[2], epoch))  // db = column sums of G
      kernels::cpu::column_sums<T>(N, O, gp, s.dst.template data<T>(), s.accumulate);
    if (auto s = autograd::grad_slot(n.in[0], epoch))  // dX = G W
      gemm<T>(false, false, N, I, O, gp, w.template data<T>(), s.dst.template data<T>(), s.accumulate);
  });
}

}  // namespace ops::detail

/// The matrix product of 2-D tensors a [M, K] and b [K, N].
inline Tensor matmul(const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.defined() && b.defined(), "matmul: undefined operand");
  STRATA_CHECK(a.ndim() == 2 && b.ndim() == 2, "matmul needs 2-D operands, got ", a.shape(), " and ", b.shape());
  STRATA_CHECK(a.dim(1) == b.dim(0), "matmul: inner extents differ: ", a.shape(), " x ", b.shape());
  STRATA_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ (", a.dtype(), " vs ", b.dtype(), ")");
  Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty({a.dim(0), b.dim(1)}, a.dtype(), a.device());
  if (on_device(a)) {
    ops::detail::device_gemm(a, false, false, a.dim(0), b.dim(1), a.dim(1), ac, bc, out, false);
  } else {
    strata::detail::visit_floating(a.dtype(), "matmul", [&](auto tag) {
      using T = decltype(tag);
      ops::detail::gemm<T>(false, false, a.dim(0), b.dim(1), a.dim(1), ac.template data<T>(), bc.template data<T>(),
                           out.template data<T>(), false);
    });
  }
  if (auto* n = autograd::record("matmul", &ops::detail::matmul_backward, out, a, b)) n->saved = {ac, bc};
  return out;
}

/// x [N, I] W^T [I, O] + b [O], then `act`; W is [O, I] (PyTorch's layout), b may be undefined.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {}, Activation act = Activation::none) {
  STRATA_CHECK(x.defined() && w.defined(), "linear: undefined operand");
  STRATA_CHECK(x.ndim() == 2 && w.ndim() == 2, "linear needs x [N, in] and weight [out, in], got ", x.shape(), " and ",
               w.shape());
  STRATA_CHECK(x.dim(1) == w.dim(1), "linear: input has ", x.dim(1), " features, weight expects ", w.dim(1));
  STRATA_CHECK(x.dtype() == w.dtype(), "linear: dtypes differ (", x.dtype(), " vs ", w.dtype(), ")");
  STRATA_CHECK(!b.defined() || (b.ndim() == 1 && b.dim(0) == w.dim(0)), "linear: bias shape ", b.shape(),
               " does not match ", w.dim(0), " outputs");
  const std::int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  Tensor xc = x.contiguous(), wc = w.contiguous();
  Tensor bc = b.defined() ? b.contiguous() : Tensor();
  Tensor out = Tensor::empty({N, O}, x.dtype(), x.device());
  if (on_device(x)) {
    const auto& dk = device_kernels("linear", x, w, b);
    ops::detail::device_gemm(x, false, true, N, O, I, xc, wc, out, false);
    dk.bias_act(x.device().index, x.dtype(), N, O, out.raw_data(), bc.defined() ? bc.raw_data() : nullptr,
                act == Activation::relu, out.raw_data());
  } else {
    strata::detail::visit_floating(x.dtype(), "linear", [&](auto tag) {
      using T = decltype(tag);
      T* y = out.template data<T>();
      ops::detail::gemm<T>(false, true, N, O, I, xc.template data<T>(), wc.template data<T>(), y, false);
      const T* bp = bc.defined() ? bc.template data<T>() : nullptr;
      kernels::cpu::bias_act_inplace<T>(N, O, y, bp, act == Activation::relu);  // one pass
    });
  }
  if (auto* n = autograd::record("linear", &ops::detail::linear_backward, out, x, w, b)) {
    n->saved = {xc, wc};
    n->i[0] = static_cast<std::int64_t>(act);
  }
  return out;
}

}  // namespace strata

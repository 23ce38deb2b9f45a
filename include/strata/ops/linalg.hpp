/// \file
/// Differentiable matrix products: matmul (batched over leading axes), and linear (x W^T + b) with an optional fused
/// ReLU, so a Linear+ReLU pair costs one GEMM and one pass over its output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/elementwise.hpp>  // relu_mask_inplace, column_sums
#include <strata/kernels/cpu/gemm.hpp>         // kernels::cpu::gemm
#include <strata/kernels/cpu/gemm_bf16.hpp>    // kernels::cpu::gemm_bf16
#include <strata/kernels/cpu/gemm_f16.hpp>     // kernels::cpu::gemm_f16
#include <strata/kernels/math/unary.hpp>     // Unary::relu
#include <strata/ops/detail/strided.hpp>      // for_each_strided: the batch entries
#include <strata/ops/shape_ops.hpp>         // reshape: linear over leading axes
#include <strata/precision/policy.hpp>      // the products' compute type
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

/// An activation that an operation applies to its output in the same pass.
enum class Activation : std::int64_t { none, relu };

namespace ops::detail {

/// A host GEMM of an operation, in the calling thread's precision: under bfloat16 (float16) a
/// float product rounds its operands to bfloat16 (float16) and sums in float32
/// (precision/policy.hpp).
template <class T>
void host_gemm(const kernels::cpu::GemmArgs<T>& g) {
  if constexpr (std::is_same_v<T, float>) {
    const DType compute = precision::current().compute;
    if (compute == DType::bf16) return kernels::cpu::gemm_bf16(g);
    if (compute == DType::f16) return kernels::cpu::gemm_f16(g);
  }
  kernels::cpu::gemm(g);
}

/// C (+)= op(A) op(B) with explicit row strides; `accumulate` adds to C instead of overwriting it.
template <class T>
void gemm_strided(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
                  const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  host_gemm(kernels::cpu::GemmArgs<T>{ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc});
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

/// How a matrix operand [..., R, C] lies in memory: row-major with row stride `ld`, or
/// transposed (its transpose row-major with row stride `ld`), so a transposed view needs no copy.
struct MatrixLayout {
  bool transposed = false;
  std::int64_t ld = 0;
};

/// The layout of `t`'s last two axes, or nothing when neither form fits (then copy it).
inline std::optional<MatrixLayout> matrix_layout(const Tensor& t) {
  const std::int64_t rows = t.dim(-2), cols = t.dim(-1);
  const std::int64_t rs = t.strides()[t.ndim() - 2], cs = t.strides()[t.ndim() - 1];
  if ((cs == 1 || cols <= 1) && rs >= std::max<std::int64_t>(cols, 1)) return MatrixLayout{false, rs};
  if ((rs == 1 || rows <= 1) && cs >= std::max<std::int64_t>(rows, 1)) return MatrixLayout{true, cs};
  return std::nullopt;
}

/// C (+)= op(A) op(B) for operands that start `*_at` elements into their tensors' first
/// elements, on the host or the operands' device.
inline void gemm_at(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const Tensor& a, std::int64_t a_at,
                    std::int64_t lda, const Tensor& b, std::int64_t b_at, std::int64_t ldb, const Tensor& c,
                    std::int64_t c_at, std::int64_t ldc, bool accumulate) {
  if (on_device(c)) {
    const auto esize = static_cast<std::int64_t>(size_of(c.dtype()));
    const auto at = [&](const Tensor& t, std::int64_t off) { return static_cast<char*>(t.raw_data()) + off * esize; };
    device_kernels("matmul", c, a, b)
        .gemm(c.device().index, c.dtype(), ta, tb, m, n, k, at(a, a_at), lda, at(b, b_at), ldb, at(c, c_at), ldc,
              accumulate);
    return;
  }
  strata::detail::visit_floating(c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    gemm_strided<T>(ta, tb, m, n, k, a.template data<T>() + a_at, lda, b.template data<T>() + b_at, ldb,
                    c.template data<T>() + c_at, ldc, accumulate);
  });
}

/// The batch axes of a matmul operand: its strides over the output's batch shape (0 along
/// every axis for a 2-D operand, which every batch entry shares).
inline Shape batch_strides(const Tensor& t, const Shape& batch) {
  Shape st = batch;
  for (int i = 0; i < batch.ndim(); ++i) st[i] = t.ndim() == 2 ? 0 : t.strides()[i];
  return st;
}

/// The output's batch shape: the operands' leading axes, which must agree unless one operand
/// is 2-D (then it is shared by every batch entry).
inline Shape matmul_batch(const Shape& a, const Shape& b) {
  const Shape& longer = a.ndim() >= b.ndim() ? a : b;
  Shape batch;
  for (int i = 0; i + 2 < longer.ndim(); ++i) batch.push_back(longer[i]);
  if (a.ndim() > 2 && b.ndim() > 2) {
    bool same = a.ndim() == b.ndim();
    for (int i = 0; same && i + 2 < a.ndim(); ++i) same = a[i] == b[i];
    STRATA_CHECK(same, "matmul: batch axes differ: ", a, " x ", b, " (they must match, or one operand be 2-D)");
  }
  return batch;
}

/// Runs f(a_at, b_at, c_at, first) for every batch entry (element offsets of each operand).
template <class F>
void for_each_batch(const Shape& batch, const Shape& a_st, const Shape& b_st, const Shape& c_st, F&& f) {
  bool first = true;
  strata::detail::for_each_strided<3>(batch, {a_st, b_st, c_st}, [&](const auto& o) {
    f(o[0], o[1], o[2], first);
    first = false;
  });
}

/// The element stride that walks an operand's batch entries in order, when its offsets over
/// the batch axes are i·stride (contiguous batch axes, or 0s for a shared operand); else none.
inline std::optional<std::int64_t> flat_batch_stride(const Shape& batch, const Shape& st) {
  std::optional<std::int64_t> base;
  std::int64_t next = 0;  // the stride the next outer axis must have
  for (int i = batch.ndim() - 1; i >= 0; --i) {
    if (batch[i] == 1) continue;
    if (base && st[i] != next) return std::nullopt;
    if (!base) base = st[i];
    next = st[i] * batch[i];
  }
  return base.value_or(0);
}

/// Every batch entry's C (+)= op(A) op(B) in one batched device GEMM, when the operands are on
/// a device with one, their batch offsets are i·stride, and no two entries share C; false:
/// the caller runs them one by one.
inline bool device_gemm_batched(const Shape& batch, const Shape& a_st, const Shape& b_st, const Shape& c_st, bool ta,
                                bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const Tensor& a,
                                std::int64_t lda, const Tensor& b, std::int64_t ldb, const Tensor& c, std::int64_t ldc,
                                bool accumulate) {
  if (!on_device(c) || batch.numel() <= 1) return false;
  const auto& dk = device_kernels("matmul", c, a, b);
  if (dk.gemm_batched == nullptr) return false;
  const auto sa = flat_batch_stride(batch, a_st), sb = flat_batch_stride(batch, b_st),
             sc = flat_batch_stride(batch, c_st);
  if (!sa || !sb || !sc || *sc == 0) return false;
  dk.gemm_batched(c.device().index, c.dtype(), ta, tb, m, n, k, a.raw_data(), lda, *sa, b.raw_data(), ldb, *sb,
                  c.raw_data(), ldc, *sc, batch.numel(), accumulate);
  return true;
}

inline void matmul_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &a = n.saved[0], &b = n.saved[1];
  const MatrixLayout la{n.i[0] != 0, n.i[1]}, lb{n.i[2] != 0, n.i[3]};
  const std::int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  const Shape batch = matmul_batch(a.shape(), b.shape());
  const Shape gst = batch_strides(g, batch);
  if (auto s = autograd::grad_slot(n.in[0], epoch)) {  // dA = G op(B)^T; summed over the batch when A is shared
    const bool shared = a.ndim() == 2 && batch.ndim() > 0;
    if (shared && batch.numel() == 0 && !s.accumulate) s.dst.fill_(0.0);
    if (shared || !device_gemm_batched(batch, gst, batch_strides(b, batch), batch_strides(s.dst, batch), false,
                                       !lb.transposed, M, K, N, g, N, b, lb.ld, s.dst, K, s.accumulate))
      for_each_batch(batch, gst, batch_strides(b, batch), batch_strides(s.dst, batch),
                     [&](std::int64_t g_at, std::int64_t b_at, std::int64_t d_at, bool first) {
                       gemm_at(false, !lb.transposed, M, K, N, g, g_at, N, b, b_at, lb.ld, s.dst, d_at, K,
                               s.accumulate || (shared && !first));
                     });
  }
  if (auto s = autograd::grad_slot(n.in[1], epoch)) {  // dB = op(A)^T G
    const bool shared = b.ndim() == 2 && batch.ndim() > 0;
    if (shared && batch.numel() == 0 && !s.accumulate) s.dst.fill_(0.0);
    if (shared || !device_gemm_batched(batch, batch_strides(a, batch), gst, batch_strides(s.dst, batch),
                                       !la.transposed, false, K, N, M, a, la.ld, g, N, s.dst, N, s.accumulate))
      for_each_batch(batch, batch_strides(a, batch), gst, batch_strides(s.dst, batch),
                     [&](std::int64_t a_at, std::int64_t g_at, std::int64_t d_at, bool first) {
                       gemm_at(!la.transposed, false, K, N, M, a, a_at, la.ld, g, g_at, N, s.dst, d_at, N,
                               s.accumulate || (shared && !first));
                     });
  }
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
    auto db = autograd::grad_slot(n.in[2], epoch);
    if (auto s = autograd::grad_slot(n.in[1], epoch)) {  // dW = G^T X, and db = column sums of G as G is read
      kernels::cpu::GemmArgs<T> dw{true, false, O, I, N, T(1), gp, O, x.template data<T>(), I,
                                   s.accumulate ? T(1) : T(0), s.dst.template data<T>(), I};
      if (db) {
        if (!db.accumulate) std::fill_n(db.dst.template data<T>(), O, T(0));
        dw.a_row_sums = db.dst.template data<T>();
      }
      host_gemm(dw);
    } else if (db) {  // db = column sums of G
      kernels::cpu::column_sums<T>(N, O, gp, db.dst.template data<T>(), db.accumulate);
    }
    if (auto s = autograd::grad_slot(n.in[0], epoch))  // dX = G W
      gemm<T>(false, false, N, I, O, gp, w.template data<T>(), s.dst.template data<T>(), s.accumulate);
  });
}

}  // namespace ops::detail

/// The matrix product over the last two axes: a [..., M, K] times b [..., K, N] is
/// [..., M, N]. Leading (batch) axes must match, or one operand be 2-D and shared by every
/// batch entry. An operand that is a transposed view (transpose(k, -1, -2)) is read as it
/// lies, without a copy; on a device, an operand whose batch entries no one stride walks is
/// copied contiguous, so that the product is one batched GEMM call.
inline Tensor matmul(const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.defined() && b.defined(), "matmul: undefined operand");
  STRATA_CHECK(a.ndim() >= 2 && b.ndim() >= 2, "matmul needs operands of at least 2 axes, got ", a.shape(), " and ",
               b.shape());
  STRATA_CHECK(a.dim(-1) == b.dim(-2), "matmul: inner extents differ: ", a.shape(), " x ", b.shape());
  STRATA_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ (", a.dtype(), " vs ", b.dtype(), ")");
  using ops::detail::MatrixLayout;
  const Shape batch = ops::detail::matmul_batch(a.shape(), b.shape());
  // On a device with a batched GEMM, an operand whose batch entries no one stride walks (the
  // heads of a [B, T, H, D] projection seen as [B, H, T, D]) is copied contiguous: one copy
  // and one batched call each way instead of a GEMM launch per entry, forward and backward.
  const bool one_call = on_device(a) && batch.numel() > 1 && device_kernels("matmul", a, b).gemm_batched != nullptr;
  const auto layout = [&](const Tensor& t) {
    auto l = ops::detail::matrix_layout(t);
    if (l && one_call && !ops::detail::flat_batch_stride(batch, ops::detail::batch_strides(t, batch))) l.reset();
    return l;
  };
  const auto la0 = layout(a), lb0 = layout(b);
  const Tensor ac = la0 ? a : a.contiguous(), bc = lb0 ? b : b.contiguous();
  const MatrixLayout la = la0 ? *la0 : MatrixLayout{false, a.dim(-1)}, lb = lb0 ? *lb0 : MatrixLayout{false, b.dim(-1)};
  const std::int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  Shape os = batch;
  os.push_back(M);
  os.push_back(N);
  Tensor out = Tensor::empty(os, a.dtype(), a.device());
  if (on_device(a)) (void)device_kernels("matmul", a, b);
  else require_host("matmul", b);
  const Shape a_st = ops::detail::batch_strides(ac, batch), b_st = ops::detail::batch_strides(bc, batch),
              c_st = ops::detail::batch_strides(out, batch);
  if (!ops::detail::device_gemm_batched(batch, a_st, b_st, c_st, la.transposed, lb.transposed, M, N, K, ac, la.ld, bc,
                                        lb.ld, out, N, false))
    ops::detail::for_each_batch(batch, a_st, b_st, c_st,
                                [&](std::int64_t a_at, std::int64_t b_at, std::int64_t c_at, bool) {
                                  ops::detail::gemm_at(la.transposed, lb.transposed, M, N, K, ac, a_at, la.ld, bc, b_at,
                                                       lb.ld, out, c_at, N, false);
                                });
  if (auto* n = autograd::record("matmul", &ops::detail::matmul_backward, out, a, b)) {
    n->saved = {ac, bc};
    n->i[0] = la.transposed;
    n->i[1] = la.ld;
    n->i[2] = lb.transposed;
    n->i[3] = lb.ld;
  }
  return out;
}

/// x [N, I] W^T [I, O] + b [O], then `act`; W is [O, I] (PyTorch's layout), b may be undefined.
/// x may have more leading axes ([..., I] gives [..., O]), like torch.nn.functional.linear.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {}, Activation act = Activation::none) {
  STRATA_CHECK(x.defined() && w.defined(), "linear: undefined operand");
  if (x.ndim() > 2 && w.ndim() == 2) {  // the leading axes as rows: two views, no copy of a contiguous x
    Shape os = x.shape();
    os[os.ndim() - 1] = w.dim(0);
    return reshape(linear(reshape(x, {-1, x.dim(-1)}), w, b, act), os);
  }
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
      // y = x Wᵀ, the bias and the activation added as the product is written
      kernels::cpu::GemmArgs<T> g{false, true, N, O, I, T(1), xc.template data<T>(), I, wc.template data<T>(), I,
                                  T(0), out.template data<T>(), O};
      g.col_bias = bc.defined() ? bc.template data<T>() : nullptr;
      g.relu = act == Activation::relu;
      ops::detail::host_gemm(g);
    });
  }
  if (auto* n = autograd::record("linear", &ops::detail::linear_backward, out, x, w, b)) {
    n->saved = {xc, wc};
    n->i[0] = static_cast<std::int64_t>(act);
  }
  return out;
}

}  // namespace strata

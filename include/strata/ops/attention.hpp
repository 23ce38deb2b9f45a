/// \file
/// Scaled dot-product attention, composed of the batched matmul and the fused scaled, causally
/// masked softmax: softmax(q kᵀ / √d) v, with no copy of kᵀ; and, for a self-attention's heads
/// packed in one host projection, the same as one operation that reads the heads in place,
/// writes them merged and skips what a causal mask hides (kernels/cpu/attention.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/attention.hpp>  // attention_forward, attention_backward
#include <strata/tensor/device_kernels.hpp>  // on_device, require_host

#include <strata/ops/linalg.hpp>      // matmul
#include <strata/ops/shape_ops.hpp>   // transpose
#include <strata/ops/softmax.hpp>     // scaled_softmax
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Attention of queries q [..., Tq, D] over keys k [..., Tk, D] and values v [..., Tk, Dv]:
/// softmax(q kᵀ / √D) v, [..., Tq, Dv]. With `causal`, query i sees the keys up to
/// i + (Tk - Tq) (with Tq = Tk, itself and the ones before). The leading axes (batch, heads)
/// must agree.
inline Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false) {
  STRATA_CHECK(q.defined() && k.defined() && v.defined(), "scaled_dot_product_attention: undefined operand");
  STRATA_CHECK(q.ndim() >= 2 && q.ndim() == k.ndim() && q.ndim() == v.ndim(),
               "scaled_dot_product_attention: q, k, v must have the same number of axes (at least 2), got ", q.shape(),
               ", ", k.shape(), ", ", v.shape());
  STRATA_CHECK(q.dim(-1) == k.dim(-1) && k.dim(-2) == v.dim(-2), "scaled_dot_product_attention: q ", q.shape(),
               ", k ", k.shape(), " and v ", v.shape(), " do not fit ([..., Tq, D], [..., Tk, D], [..., Tk, Dv])");
  STRATA_CHECK(q.dim(-1) > 0, "scaled_dot_product_attention: the head width is 0");
  const Tensor scores = matmul(q, transpose(k, -1, -2));
  const Tensor p = ops::detail::scaled_softmax(scores, 1.0 / std::sqrt(static_cast<double>(q.dim(-1))),
                                               causal ? q.dim(-2) : 0);
  return matmul(p, v);
}

namespace ops::detail {

inline kernels::cpu::AttentionShape attention_shape(const Tensor& qkv, std::int64_t heads, bool causal) {
  return {qkv.dim(0), qkv.dim(1), heads, qkv.dim(2) / (3 * heads), causal};
}

inline void self_attention_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor &qkv = n.saved[0], &probs = n.saved[1];
  const auto shape = attention_shape(qkv, n.i[0], n.i[1] != 0);
  const Tensor scratch = Tensor::empty({kernels::cpu::attention_scratch(shape)}, qkv.dtype());
  const Tensor g = autograd::grad_output(n).contiguous();
  strata::detail::visit_floating(qkv.dtype(), "self_attention", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::attention_backward<T>(shape, qkv.template data<T>(), probs.template data<T>(), g.template data<T>(),
                                        static_cast<T>(n.f[0]), scratch.template data<T>(), s.dst.template data<T>(),
                                        s.accumulate);
  });
}

/// Self-attention of the heads packed in one projection on the host: qkv [B, T, 3W] holds each
/// token's queries, keys and values, head h's in columns [hD, (h+1)D) of each third (D = W /
/// heads); returns the heads' outputs merged, [B, T, W]. Equal to splitting the heads, calling
/// scaled_dot_product_attention on each and merging them, without the copies of either.
inline Tensor self_attention(const Tensor& qkv, std::int64_t heads, bool causal) {
  STRATA_CHECK(qkv.defined() && qkv.ndim() == 3, "self_attention: qkv must be [B, T, 3W], got ", qkv.shape());
  STRATA_CHECK(heads > 0 && qkv.dim(2) % (3 * heads) == 0 && qkv.dim(2) > 0, "self_attention: qkv's ", qkv.dim(2),
               " columns are not 3 x ", heads, " heads of a positive width");
  require_host("self_attention", qkv);
  const Tensor x = qkv.contiguous();
  const auto shape = attention_shape(x, heads, causal);
  const std::int64_t B = shape.batch, Tn = shape.tokens;
  Tensor out = Tensor::empty({B, Tn, shape.width()}, x.dtype());
  Tensor probs = Tensor::empty({B, heads, Tn, Tn}, x.dtype());
  const Tensor scratch = Tensor::empty({kernels::cpu::attention_scratch(shape)}, x.dtype());
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_width));
  strata::detail::visit_floating(x.dtype(), "self_attention", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::attention_forward<T>(shape, x.template data<T>(), static_cast<T>(scale), probs.template data<T>(),
                                       scratch.template data<T>(), out.template data<T>());
  });
  if (auto* n = autograd::record("self_attention", &self_attention_backward, out, qkv)) {
    n->saved = {x, probs};
    n->i[0] = heads;
    n->i[1] = causal;
    n->f[0] = scale;
  }
  return out;
}

}  // namespace ops::detail

}  // namespace strata

/// \file
/// Scaled dot-product attention, composed of the batched matmul and the fused scaled, causally
/// masked softmax: softmax(q kᵀ / √d) v, with no copy of kᵀ.
#pragma once

#include <cmath>

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

}  // namespace strata

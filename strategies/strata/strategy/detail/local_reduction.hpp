/// \file
/// What the strategies with several replicas in one process return from a step: the local
/// replicas' tensors gathered along axis 0, or reduced elementwise with the collectives' own
/// reduction kernels.
#pragma once

#include <cstring>

#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/detail/reduce.hpp>  // combine, divide
#include <strata/collective/reduce_op.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// The replicas' tensors concatenated along axis 0 (every other extent and the dtype equal).
inline Tensor concat_rows(const PerReplica<Tensor>& v) {
  STRATA_CHECK(v.size() > 0 && v[0].defined() && v[0].ndim() >= 1, "gather: needs tensors with an axis 0");
  Shape s = v[0].shape();
  std::int64_t rows = 0;
  for (std::size_t r = 0; r < v.size(); ++r) {
    Shape sr = v[r].shape();
    STRATA_CHECK(sr.ndim() == s.ndim() && v[r].dtype() == v[0].dtype(), "gather: replica ", r, " returned ",
                 name_of(v[r].dtype()), " ", sr, ", replica 0 ", name_of(v[0].dtype()), " ", s);
    sr[0] = s[0];
    STRATA_CHECK(sr == s, "gather: replica ", r, " returned shape ", v[r].shape(), ", replica 0 ", v[0].shape(),
                 " (only axis 0 may differ)");
    rows += v[r].dim(0);
  }
  s[0] = rows;
  Tensor out = Tensor::empty(s, v[0].dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& t : v) {
    const Tensor c = t.contiguous();
    if (c.nbytes() == 0) continue;  // an empty replica's rows (its data pointer may be null)
    std::memcpy(dst, c.raw_data(), c.nbytes());
    dst += c.nbytes();
  }
  return out;
}

/// The elementwise reduction of the local replicas' values (Mean: over `denominator` values),
/// with the collectives' own reduction kernels.
inline double reduce_local(ReduceOp op, const PerReplica<double>& v, std::size_t denominator) {
  STRATA_CHECK(v.size() > 0, "reduce of an empty PerReplica");
  double acc = v[0];
  for (std::size_t r = 1; r < v.size(); ++r) collective::detail::combine<double>(op, 1, &acc, &v[r]);
  if (op == ReduceOp::Mean) collective::detail::divide<double>(1, &acc, static_cast<int>(denominator));
  return acc;
}
inline Tensor reduce_local(ReduceOp op, const PerReplica<Tensor>& v, std::size_t denominator) {
  STRATA_CHECK(v.size() > 0, "reduce of an empty PerReplica");
  NoGradGuard no_grad;
  Tensor acc = v[0].contiguous().clone();
  strata::detail::visit_floating(acc.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    const auto n = static_cast<std::size_t>(acc.numel());
    for (std::size_t r = 1; r < v.size(); ++r) {
      STRATA_CHECK(v[r].shape() == acc.shape() && v[r].dtype() == acc.dtype(), "reduce: replica ", r,
                   " returned shape ", v[r].shape(), ", replica 0 ", acc.shape());
      const Tensor c = v[r].contiguous();
      collective::detail::combine<T>(op, n, acc.template data<T>(), c.template data<T>());
    }
    if (op == ReduceOp::Mean) collective::detail::divide<T>(n, acc.template data<T>(), static_cast<int>(denominator));
  });
  return acc;
}

}  // namespace strata::detail

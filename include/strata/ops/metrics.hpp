/// \file
/// Non-differentiable metrics: argmax and classification accuracy.
#pragma once

#include <cstdint>

#include <strata/ops/loss.hpp>  // ops::detail::visit_label
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Index of the largest element in each row of a 2-D tensor, as int64 [N] on the host. The first maximum
/// wins ties.
inline Tensor argmax(const Tensor& x) {
  STRATA_CHECK(x.defined() && x.ndim() == 2 && x.dim(1) > 0, "argmax needs a 2-D tensor with columns, got ", x.shape());
  Tensor xc = x.to(Device::cpu()).contiguous();  // a device's logits: one copy of N x C values
  Tensor out = Tensor::empty({x.dim(0)}, DType::i64);
  std::int64_t* o = out.data<std::int64_t>();
  strata::detail::visit_floating(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* p = xc.template data<T>();
    const std::int64_t C = x.dim(1);
    for (std::int64_t r = 0; r < x.dim(0); ++r) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < C; ++c)
        if (p[r * C + c] > p[r * C + best]) best = c;
      o[r] = best;
    }
  });
  return out;
}

/// How many rows of `logits` [N, C] have their argmax equal to `labels` [N].
inline std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  STRATA_CHECK(labels.defined() && labels.ndim() == 1 && labels.dim(0) == logits.dim(0), "count_correct: labels shape ",
               labels.shape(), " does not match logits ", logits.shape());
  Tensor pred = argmax(logits);
  Tensor lc = labels.to(Device::cpu()).contiguous();
  const std::int64_t* p = pred.data<std::int64_t>();
  std::int64_t correct = 0;
  ops::detail::visit_label(lc.dtype(), [&](auto ltag) {
    using L = decltype(ltag);
    const L* l = lc.template data<L>();
    for (std::int64_t r = 0; r < pred.numel(); ++r) correct += p[r] == static_cast<std::int64_t>(l[r]);
  });
  return correct;
}

/// The fraction of rows classified correctly.
inline double accuracy(const Tensor& logits, const Tensor& labels) {
  STRATA_CHECK(logits.dim(0) > 0, "accuracy of an empty batch");
  return static_cast<double>(count_correct(logits, labels)) / static_cast<double>(logits.dim(0));
}

}  // namespace strata

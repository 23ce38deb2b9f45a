/// \file
/// Differentiable log-softmax, the fused softmax + cross-entropy primitive, and binary
/// cross-entropy of logits element by element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/softmax.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

/// The label of a padding row: the losses and metrics skip it.
inline constexpr int kPadLabel = -1;

namespace ops::detail {

inline void log_softmax_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const std::int64_t rows = n.out.dim(0), cols = n.out.dim(1);
  if (on_device(n.out)) {
    const Tensor& g = autograd::grad_output(n);
    device_kernels("log_softmax", g, s.dst)
        .log_softmax_backward(g.device().index, g.dtype(), rows, cols, n.out.raw_data(), g.raw_data(),
                              s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::log_softmax_backward<T>(rows, cols, n.out.template data<T>(),
                                          autograd::grad_output(n).template data<T>(), s.dst.template data<T>(),
                                          s.accumulate);
  });
}

template <class F>
decltype(auto) visit_label(DType t, F&& f) {
  if (t == DType::i64) return f(std::int64_t{});
  if (t == DType::i32) return f(std::int32_t{});
  STRATA_THROW(::strata::invalid_argument, "strata.dtype", "labels must be int32 or int64, got ", name_of(t));
}

inline void softmax_xent_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor &prob = n.saved[0], &labels = n.saved[1];
  const std::int64_t rows = prob.dim(0), cols = prob.dim(1);
  if (on_device(prob)) {
    const double scale = n.f[0] * autograd::grad_output(n).item();
    device_kernels("cross_entropy", prob, labels, s.dst)
        .softmax_xent_backward(prob.device().index, prob.dtype(), labels.dtype(), rows, cols, prob.raw_data(),
                               labels.raw_data(), scale, s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(prob.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(n.f[0] * autograd::grad_output(n).item());
    visit_label(labels.dtype(), [&](auto ltag) {
      using L = decltype(ltag);
      kernels::cpu::softmax_xent_backward<T, L>(rows, cols, prob.template data<T>(), labels.template data<L>(), scale,
                                                s.dst.template data<T>(), s.accumulate);
    });
  });
}

/// softmax_cross_entropy_rows' backward: dlogits[r] = g[r] (softmax(logits[r]) - onehot(r)).
inline void softmax_xent_rows_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor &prob = n.saved[0], &labels = n.saved[1];
  const Tensor g = autograd::grad_output(n).contiguous();
  strata::detail::visit_floating(prob.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    visit_label(labels.dtype(), [&](auto ltag) {
      using L = decltype(ltag);
      kernels::cpu::softmax_xent_backward<T, L>(prob.dim(0), prob.dim(1), prob.template data<T>(),
                                                labels.template data<L>(), T(1), s.dst.template data<T>(), s.accumulate,
                                                g.template data<T>());
    });
  });
}

/// Checks the labels of a softmax cross-entropy over `cols` classes: class indices in
/// [0, cols) or kPadLabel; a device's labels are copied to the host for it.
inline void check_class_labels(const Tensor& labels, std::int64_t cols) {
  const Tensor host = labels.to(Device::cpu());
  visit_label(host.dtype(), [&](auto ltag) {
    using L = decltype(ltag);
    const L* l = host.template data<L>();
    for (std::int64_t r = 0; r < host.dim(0); ++r)
      STRATA_CHECK((l[r] >= 0 && static_cast<std::int64_t>(l[r]) < cols) || l[r] == kPadLabel, "cross_entropy: label ",
                   +l[r], " of row ", r, " is outside [0, ", cols, ") and is not the padding label ", kPadLabel);
  });
}

/// The logistic function, in a form that does not overflow for either sign of x.
template <class T>
T logistic(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

/// d/dx = g (sigmoid(x) - z), d/dz = -g x: the derivative itself at x = 0 too, where the
/// stable form's max and |x| have their kinks.
inline void bce_logits_backward(autograd::Node& n, std::uint64_t epoch) {
  auto sx = autograd::grad_slot(n.in[0], epoch), sz = autograd::grad_slot(n.in[1], epoch);
  const Tensor &x = n.saved[0], &z = n.saved[1];
  strata::detail::visit_floating(x.dtype(), "bce_with_logits", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.template data<T>();
    const T* zp = z.template data<T>();
    const T* g = autograd::grad_output(n).template data<T>();
    const std::int64_t count = x.numel();
    if (sx) {
      T* d = sx.dst.template data<T>();
      for (std::int64_t i = 0; i < count; ++i) {
        const T v = g[i] * (logistic(xp[i]) - zp[i]);
        d[i] = sx.accumulate ? d[i] + v : v;
      }
    }
    if (sz) {
      T* d = sz.dst.template data<T>();
      for (std::int64_t i = 0; i < count; ++i) d[i] = sz.accumulate ? d[i] - g[i] * xp[i] : -g[i] * xp[i];
    }
  });
}

}  // namespace ops::detail

/// Binary cross-entropy of each logit x against its target z in [0, 1]:
/// max(x, 0) - x z + log(1 + exp(-|x|)), stable for any |x|, with the exact gradient
/// sigmoid(x) - z (also at x = 0). x and z of one shape and floating dtype, on the host.
inline Tensor bce_with_logits_elements(const Tensor& logits, const Tensor& targets) {
  STRATA_CHECK(logits.defined() && targets.defined(), "bce_with_logits: undefined operand");
  STRATA_CHECK(logits.shape() == targets.shape() && logits.dtype() == targets.dtype(), "bce_with_logits: logits ",
               logits.shape(), " ", name_of(logits.dtype()), " and targets ", targets.shape(), " ",
               name_of(targets.dtype()), " differ");
  require_host("bce_with_logits", logits, targets);
  const Tensor x = logits.contiguous(), z = targets.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  strata::detail::visit_floating(x.dtype(), "bce_with_logits", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.template data<T>();
    const T* zp = z.template data<T>();
    T* o = out.template data<T>();
    for (std::int64_t i = 0, count = x.numel(); i < count; ++i)
      o[i] = std::max(xp[i], T(0)) - xp[i] * zp[i] + std::log1p(std::exp(-std::abs(xp[i])));
  });
  if (auto* n = autograd::record("bce_with_logits", &ops::detail::bce_logits_backward, out, logits, targets))
    n->saved = {x, z};
  return out;
}

/// Row-wise log-softmax of a 2-D tensor [N, C].
inline Tensor log_softmax(const Tensor& x) {
  STRATA_CHECK(x.defined() && x.ndim() == 2, "log_softmax needs a 2-D tensor [N, C], got ", x.shape());
  STRATA_CHECK(x.dim(1) > 0, "log_softmax over zero classes");
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (on_device(x))
    device_kernels("log_softmax", x).log_softmax_forward(x.device().index, x.dtype(), x.dim(0), x.dim(1), xc.raw_data(),
                                                         out.raw_data());
  else
    strata::detail::visit_floating(x.dtype(), "log_softmax", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::log_softmax_forward<T>(x.dim(0), x.dim(1), xc.template data<T>(), out.template data<T>());
    });
  autograd::record("log_softmax", &ops::detail::log_softmax_backward, out, x);
  return out;
}

/// scale * sum over rows of (logsumexp(logits[r]) - logits[r, labels[r]]), as a 0-d tensor:
/// softmax and cross-entropy fused, stable for any logit magnitude. Labels are int32/int64
/// class indices in [0, C), or kPadLabel (-1) for a padding row, which adds nothing to the
/// loss or the gradient (Pipeline::batch(n, Remainder::pad)).
inline Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double scale) {
  STRATA_CHECK(logits.defined() && logits.ndim() == 2, "cross_entropy needs logits [N, C], got ", logits.shape());
  STRATA_CHECK(labels.defined() && labels.ndim() == 1 && labels.dim(0) == logits.dim(0), "cross_entropy: labels shape ",
               labels.shape(), " does not match logits ", logits.shape());
  STRATA_CHECK(logits.dim(1) > 0, "cross_entropy over zero classes: logits ", logits.shape());
  const std::int64_t rows = logits.dim(0), cols = logits.dim(1);
  Tensor xc = logits.contiguous(), lc = labels.contiguous();
  ops::detail::check_class_labels(lc, cols);
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor out = Tensor::empty({}, logits.dtype(), logits.device());
  if (on_device(logits)) {
    device_kernels("cross_entropy", logits, lc)
        .softmax_xent_forward(logits.device().index, logits.dtype(), lc.dtype(), rows, cols, xc.raw_data(),
                              lc.raw_data(), prob.raw_data(), out.raw_data(), scale);
  } else {
    strata::detail::visit_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      ops::detail::visit_label(lc.dtype(), [&](auto ltag) {
        using L = decltype(ltag);
        const double total = kernels::cpu::softmax_xent_forward<T, L>(rows, cols, xc.template data<T>(),
                                                                      lc.template data<L>(), prob.template data<T>());
        *out.template data<T>() = static_cast<T>(total * scale);
      });
    });
  }
  if (auto* n = autograd::record("cross_entropy", &ops::detail::softmax_xent_backward, out, logits)) {
    n->saved = {prob, lc};
    n->f[0] = scale;
  }
  return out;
}

/// Each row's logsumexp(logits[r]) - logits[r, labels[r]] as a [N] tensor (0 for a padding row,
/// label kPadLabel): the per-example softmax cross-entropy, fused (one pass forward, one back,
/// no one-hot and no log-probabilities kept), on the host. Labels as softmax_cross_entropy's.
inline Tensor softmax_cross_entropy_rows(const Tensor& logits, const Tensor& labels) {
  STRATA_CHECK(logits.defined() && logits.ndim() == 2, "cross_entropy needs logits [N, C], got ", logits.shape());
  STRATA_CHECK(labels.defined() && labels.ndim() == 1 && labels.dim(0) == logits.dim(0), "cross_entropy: labels shape ",
               labels.shape(), " does not match logits ", logits.shape());
  STRATA_CHECK(logits.dim(1) > 0, "cross_entropy over zero classes: logits ", logits.shape());
  require_host("cross_entropy", logits, labels);
  const std::int64_t rows = logits.dim(0), cols = logits.dim(1);
  Tensor xc = logits.contiguous(), lc = labels.contiguous();
  ops::detail::check_class_labels(lc, cols);
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype());
  Tensor out = Tensor::empty({rows}, logits.dtype());
  strata::detail::visit_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    ops::detail::visit_label(lc.dtype(), [&](auto ltag) {
      using L = decltype(ltag);
      (void)kernels::cpu::softmax_xent_forward<T, L>(rows, cols, xc.template data<T>(), lc.template data<L>(),
                                                     prob.template data<T>(), out.template data<T>());
    });
  });
  if (auto* n = autograd::record("cross_entropy", &ops::detail::softmax_xent_rows_backward, out, logits))
    n->saved = {prob, lc};
  return out;
}

}  // namespace strata

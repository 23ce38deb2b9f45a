/// \file
/// Losses with an explicit reduction. Each computes one loss per example (the mean over the
/// example's elements) and reduces them as `Reduction` says. Under a strategy with several
/// replicas in sync, the replicas' gradients are summed, so the loss a replica returns must be
/// its examples' share of the global mean: Reduction::sum_over_global_batch, or
/// compute_average_loss on Reduction::none's per-example losses (tf.distribute's rule). A
/// local mean there would scale every gradient by the replica count: it is an error inside
/// Strategy::run unless asked for as Reduction::local_mean.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/ops/elementwise.hpp>
#include <strata/ops/loss.hpp>
#include <strata/ops/reduce.hpp>
#include <strata/ops/shape_ops.hpp>
#include <strata/support/replica_thread.hpp>
#include <strata/tensor/factory.hpp>  // zeros, ones

namespace strata::nn {

/// How per-example losses become what the loss returns.
enum class Reduction {
  none,                   ///< the per-example losses, shape [N]
  mean,                   ///< divided by this batch's size; an error inside run() with several replicas in sync
  sum,                    ///< summed
  sum_over_global_batch,  ///< summed, divided by the global batch size (Batch::global_size, across all replicas)
  local_mean,             ///< divided by this replica's batch size, also with several replicas: on purpose
};

namespace detail {

/// Reduction::mean with several replicas in sync is the silent mis-scaling this file exists
/// to prevent: say what to use instead.
inline void check_not_local_mean(const char* loss) {
  const ReplicaInfo& r = replica_info();
  if (r.in_step && r.replicas_in_sync > 1)
    STRATA_THROW(invalid_argument, "strata.loss.reduction", loss, " with Reduction::mean inside Strategy::run with ",
                 r.replicas_in_sync, " replicas in sync: the replicas' gradients are summed, so a mean over this "
                 "replica's rows scales them by ", r.replicas_in_sync, ". Use Reduction::sum_over_global_batch with "
                 "Batch::global_size, or Reduction::none and compute_average_loss(per_example, batch); "
                 "Reduction::local_mean if the local mean is what you mean");
}

/// The scale that turns a sum over `rows` examples into `r`'s reduction.
inline double reduction_scale(const char* loss, Reduction r, std::int64_t rows, std::int64_t global_batch) {
  switch (r) {
    case Reduction::mean:
      check_not_local_mean(loss);
      [[fallthrough]];
    case Reduction::local_mean:
      STRATA_CHECK(rows > 0, loss, ": a mean over an empty batch");
      return 1.0 / static_cast<double>(rows);
    case Reduction::sum_over_global_batch:
      STRATA_CHECK(global_batch > 0, loss, ": Reduction::sum_over_global_batch needs the global batch size "
                   "(Batch::global_size), got ", global_batch);
      return 1.0 / static_cast<double>(global_batch);
    case Reduction::sum:
    case Reduction::none: return 1.0;
  }
  return 1.0;
}

/// Per-example losses [N] reduced as `r` says.
inline Tensor reduce_loss(const char* loss, const Tensor& per_example, Reduction r, std::int64_t global_batch) {
  if (r == Reduction::none) return per_example;
  const double scale = reduction_scale(loss, r, per_example.dim(0), global_batch);
  Tensor total = sum(per_example);
  return scale == 1.0 ? total : mul(total, scale);
}

/// The mean over each example's elements: [N, ...] -> [N].
inline Tensor mean_per_example(const Tensor& x) {
  if (x.ndim() == 1) return x;
  return mean(flatten(x), {1});
}

inline void check_pair(const char* loss, const Tensor& pred, const Tensor& target) {
  STRATA_CHECK(pred.defined() && target.defined(), loss, ": undefined operand");
  STRATA_CHECK(pred.ndim() >= 1, loss, ": predictions need a batch axis, got shape ", pred.shape());
  STRATA_CHECK(pred.shape() == target.shape(), loss, ": predictions ", pred.shape(), " and targets ", target.shape(),
               " differ in shape");
  STRATA_CHECK(pred.dtype() == target.dtype(), loss, ": predictions (", pred.dtype(), ") and targets (",
               target.dtype(), ") differ in dtype");
}

/// |x|, with the derivative 0 at 0.
inline Tensor abs(const Tensor& x) { return add(relu(x), relu(neg(x))); }

/// One-hot rows [N, C] of `labels` in `like`'s dtype and device; kPadLabel rows are all zero.
inline Tensor one_hot(const char* loss, const Tensor& labels, std::int64_t classes, const Tensor& like) {
  STRATA_CHECK(labels.ndim() == 1 && (labels.dtype() == DType::i64 || labels.dtype() == DType::i32), loss,
               ": labels must be one class index per example (int64 or int32 [N]), got ", labels.dtype(), " ",
               labels.shape());
  const Tensor host = labels.to(Device::cpu());
  Tensor out = zeros({labels.dim(0), classes}, like.dtype());
  strata::detail::visit_floating(like.dtype(), loss, [&](auto tag) {
    using T = decltype(tag);
    T* o = out.template data<T>();
    for (std::int64_t r = 0; r < labels.dim(0); ++r) {
      const std::int64_t l = host.dtype() == DType::i64 ? host.data<std::int64_t>()[r] : host.data<std::int32_t>()[r];
      if (l == kPadLabel) continue;
      STRATA_CHECK(l >= 0 && l < classes, loss, ": label ", l, " of row ", r, " is outside [0, ", classes, ")");
      o[r * classes + l] = T(1);
    }
  });
  return out.to(like.device());
}

/// 1 for each real row, 0 for each padding row (label kPadLabel), in `like`'s dtype and device.
inline Tensor valid_rows(const Tensor& labels, const Tensor& like) {
  const Tensor host = labels.to(Device::cpu());
  Tensor out = ones({labels.dim(0)}, like.dtype());
  strata::detail::visit_floating(like.dtype(), "valid_rows", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t r = 0; r < labels.dim(0); ++r) {
      const std::int64_t l = host.dtype() == DType::i64 ? host.data<std::int64_t>()[r] : host.data<std::int32_t>()[r];
      if (l == kPadLabel) out.template data<T>()[r] = T(0);
    }
  });
  return out.to(like.device());
}

}  // namespace detail

/// Mean squared error: per example, the mean over its elements of (pred - target)^2.
inline Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction r = Reduction::mean,
                       std::int64_t global_batch = 0) {
  detail::check_pair("mse_loss", pred, target);
  Tensor d = sub(pred, target);
  return detail::reduce_loss("mse_loss", detail::mean_per_example(mul(d, d)), r, global_batch);
}

/// Mean absolute error: per example, the mean over its elements of |pred - target|.
inline Tensor l1_loss(const Tensor& pred, const Tensor& target, Reduction r = Reduction::mean,
                      std::int64_t global_batch = 0) {
  detail::check_pair("l1_loss", pred, target);
  return detail::reduce_loss("l1_loss", detail::mean_per_example(detail::abs(sub(pred, target))), r, global_batch);
}

/// Huber loss with threshold `delta`: 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta),
/// averaged over each example's elements (PyTorch's HuberLoss, Keras' Huber).
inline Tensor huber_loss(const Tensor& pred, const Tensor& target, double delta = 1.0, Reduction r = Reduction::mean,
                         std::int64_t global_batch = 0) {
  detail::check_pair("huber_loss", pred, target);
  STRATA_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  Tensor a = detail::abs(sub(pred, target));
  Tensor q = sub(a, relu(add(a, -delta)));  // min(|d|, delta)
  Tensor per = add(mul(mul(q, q), 0.5), mul(sub(a, q), delta));
  return detail::reduce_loss("huber_loss", detail::mean_per_example(per), r, global_batch);
}

/// Binary cross-entropy of logits against targets in [0, 1], in the stable form
/// max(x, 0) - x z + log(1 + exp(-|x|)), averaged over each example's elements; its gradient
/// is sigmoid(x) - z (PyTorch's BCEWithLogitsLoss), at x = 0 too.
inline Tensor bce_with_logits(const Tensor& logits, const Tensor& targets, Reduction r = Reduction::mean,
                              std::int64_t global_batch = 0) {
  detail::check_pair("bce_with_logits", logits, targets);
  return detail::reduce_loss("bce_with_logits", detail::mean_per_example(bce_with_logits_elements(logits, targets)), r,
                             global_batch);
}

/// Negative log-likelihood of log-probabilities [N, C] (log_softmax's output) at class labels
/// [N]; a padding row (kPadLabel) adds 0.
inline Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, Reduction r = Reduction::mean,
                       std::int64_t global_batch = 0) {
  STRATA_CHECK(log_probs.defined() && log_probs.ndim() == 2, "nll_loss: log-probabilities must be [N, C], got ",
               log_probs.shape());
  STRATA_CHECK(labels.defined() && labels.ndim() == 1 && labels.dim(0) == log_probs.dim(0), "nll_loss: labels ",
               labels.shape(), " do not match log-probabilities ", log_probs.shape());
  Tensor onehot = detail::one_hot("nll_loss", labels, log_probs.dim(1), log_probs);
  return detail::reduce_loss("nll_loss", neg(sum(mul(onehot, log_probs), {1})), r, global_batch);
}

/// Softmax cross-entropy of logits [N, C] against class labels [N] (a padding row, label
/// kPadLabel, adds 0). `label_smoothing` e mixes the one-hot target with the uniform one:
/// (1 - e) onehot + e / C (PyTorch's CrossEntropyLoss(label_smoothing=e)).
inline Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Reduction r = Reduction::mean,
                            std::int64_t global_batch = 0, double label_smoothing = 0.0) {
  STRATA_CHECK(logits.defined() && logits.ndim() == 2, "cross_entropy: logits must be [N, C], got ", logits.shape());
  STRATA_CHECK(labels.defined() && labels.ndim() == 1 && labels.dim(0) == logits.dim(0), "cross_entropy: labels ",
               labels.shape(), " do not match logits ", logits.shape());
  STRATA_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
               label_smoothing);
  if (r != Reduction::none && label_smoothing == 0.0)  // the fused kernel: one pass, and a device path
    return softmax_cross_entropy(logits, labels,
                                 detail::reduction_scale("cross_entropy", r, logits.dim(0), global_batch));
  if (label_smoothing == 0.0 && logits.device() == Device::cpu())  // per example, fused on the host
    return softmax_cross_entropy_rows(logits, labels);
  const std::int64_t classes = logits.dim(1);
  Tensor logp = log_softmax(logits);
  Tensor per = neg(sum(mul(detail::one_hot("cross_entropy", labels, classes, logits), logp), {1}));
  if (label_smoothing > 0) {
    Tensor uniform = neg(sum(logp, {1}));  // sum over the classes of -log p
    per = add(mul(per, 1.0 - label_smoothing),
              mul(mul(uniform, detail::valid_rows(labels, logits)), label_smoothing / static_cast<double>(classes)));
  }
  return detail::reduce_loss("cross_entropy", per, r, global_batch);
}

}  // namespace strata::nn

namespace strata {

/// The global-batch average of per-example losses [N] (a loss's Reduction::none): their sum
/// over `global_batch`, the examples in this step across every replica. Summed over the
/// replicas, as the strategies sum gradients, it is the mean over the global batch
/// (tf.distribute's compute_average_loss).
inline Tensor compute_average_loss(const Tensor& per_example, std::int64_t global_batch) {
  STRATA_CHECK(per_example.defined() && per_example.ndim() == 1, "compute_average_loss: per-example losses must "
               "be [N] (a loss's Reduction::none), got shape ", per_example.shape());
  return nn::detail::reduce_loss("compute_average_loss", per_example, nn::Reduction::sum_over_global_batch,
                                 global_batch);
}

/// The same for `batch`, a replica's rows: the global size is batch.global_size, and the
/// trailing padding rows of Remainder::pad (batch.padding) count nowhere.
inline Tensor compute_average_loss(const Tensor& per_example, const data::Batch& batch) {
  STRATA_CHECK(per_example.defined() && per_example.ndim() == 1 && per_example.dim(0) == batch.size,
               "compute_average_loss: per-example losses ", per_example.shape(), " do not match the batch's ",
               batch.size, " rows");
  if (batch.padding == 0) return compute_average_loss(per_example, batch.global_size);
  Tensor keep = ones({batch.size}, per_example.dtype());
  strata::detail::visit_floating(per_example.dtype(), "compute_average_loss", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t r = batch.size - batch.padding; r < batch.size; ++r) keep.template data<T>()[r] = T(0);
  });
  return compute_average_loss(mul(per_example, keep.to(per_example.device())), batch.global_size);
}

}  // namespace strata

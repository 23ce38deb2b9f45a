/// \file
/// Accuracy and ConfusionCount: streaming classification metrics over class logits [N, C] and
/// integer labels [N]. Padding rows (label kPadLabel, Remainder::pad) count nowhere, so a read
/// gives the figures of the real examples whatever the remainder policy; per replica inside
/// Strategy::run, summed across every replica and process when read (see replica_slots.hpp).
#pragma once

#include <cstdint>
#include <span>

#include <strata/data/dataset.hpp>
#include <strata/metrics/replica_slots.hpp>
#include <strata/ops/loss.hpp>     // kPadLabel, visit_label
#include <strata/ops/metrics.hpp>  // argmax
#include <strata/tensor/tensor.hpp>

namespace strata::metrics {

namespace detail {
/// Calls fn(label, predicted) for each row of `logits` [N, C] whose label is not kPadLabel,
/// after checking every label is a class of C (or padding).
template <class F>
void for_each_labelled_row(const Tensor& logits, const Tensor& labels, const char* metric, F&& fn) {
  STRATA_REQUIRE(logits.defined() && logits.ndim() == 2 && logits.dim(1) > 0, invalid_argument, "strata.metrics",
                 metric, ".update: needs class logits [N, C], got ", logits.defined() ? logits.shape() : Shape{});
  STRATA_REQUIRE(labels.defined() && labels.ndim() == 1 && labels.dim(0) == logits.dim(0), invalid_argument,
                 "strata.metrics", metric, ".update: labels must be [", logits.dim(0), "] for logits ",
                 logits.shape(), ", got ", labels.defined() ? labels.shape() : Shape{});
  const Tensor pred = argmax(logits);
  const Tensor l = labels.to(Device::cpu()).contiguous();
  const std::int64_t classes = logits.dim(1);
  const std::int64_t* p = pred.data<std::int64_t>();
  ops::detail::visit_label(l.dtype(), [&](auto tag) {
    using L = decltype(tag);
    const L* y = l.template data<L>();
    for (std::int64_t r = 0; r < pred.numel(); ++r) {
      const auto label = static_cast<std::int64_t>(y[r]);
      if (label == kPadLabel) continue;
      STRATA_REQUIRE(0 <= label && label < classes, invalid_argument, "strata.metrics", metric, ".update: label ",
                     label, " in row ", r, " is not a class of the ", classes, " logits (nor kPadLabel)");
      fn(label, p[r]);
    }
  });
}
}  // namespace detail

/// The fraction of examples whose largest logit is their label (tf.keras.metrics.Accuracy on
/// argmax predictions).
class Accuracy {
 public:
  struct Counts {
    std::int64_t correct = 0, examples = 0;
  };

  Accuracy() : slots_(2) {}

  /// Counts the rows of `logits` [N, C] against `labels` [N] (padding rows left out).
  void update(const Tensor& logits, const Tensor& labels) {
    std::int64_t correct = 0, examples = 0;
    detail::for_each_labelled_row(logits, labels, "Accuracy", [&](std::int64_t label, std::int64_t predicted) {
      correct += label == predicted;
      ++examples;
    });
    const std::span<double> s = slots_.mine();
    s[0] += static_cast<double>(correct);
    s[1] += static_cast<double>(examples);
  }
  /// The same, with the batch's labels: what evaluate() calls.
  void update(const Tensor& logits, const data::Batch& batch) { update(logits, batch.y); }

  /// Correct answers and examples over every replica and process (exact up to 2^53): a
  /// collective, on every process outside run().
  template <class S>
  Counts counts(S& strategy) const {
    const auto t = slots_.read(strategy, "Accuracy");
    return {static_cast<std::int64_t>(t[0]), static_cast<std::int64_t>(t[1])};
  }
  /// correct / examples (NaN before any example): a collective, like counts().
  template <class S>
  double result(S& strategy) const {
    const Counts c = counts(strategy);
    return c.examples == 0 ? NAN : static_cast<double>(c.correct) / static_cast<double>(c.examples);
  }
  void reset() { slots_.reset("Accuracy"); }

 private:
  detail::ReplicaSlots slots_;
};

/// How many examples of each class were predicted as each class (tf.math.confusion_matrix).
class ConfusionCount {
 public:
  explicit ConfusionCount(std::int64_t classes) : classes_(checked(classes)), slots_(static_cast<std::size_t>(classes * classes)) {}

  /// Counts the rows of `logits` [N, classes] against `labels` [N] (padding rows left out).
  void update(const Tensor& logits, const Tensor& labels) {
    STRATA_REQUIRE(!logits.defined() || logits.ndim() != 2 || logits.dim(1) == classes_, invalid_argument,
                   "strata.metrics", "ConfusionCount(", classes_, ").update: logits have ", logits.dim(1), " classes");
    const std::span<double> s = slots_.mine();
    detail::for_each_labelled_row(logits, labels, "ConfusionCount", [&](std::int64_t label, std::int64_t predicted) {
      s[static_cast<std::size_t>(label * classes_ + predicted)] += 1;
    });
  }
  void update(const Tensor& logits, const data::Batch& batch) { update(logits, batch.y); }

  /// int64 [classes, classes]: row = label, column = prediction, over every replica and
  /// process; a collective, on every process outside run().
  template <class S>
  Tensor result(S& strategy) const {
    const auto t = slots_.read(strategy, "ConfusionCount");
    Tensor out = Tensor::empty({classes_, classes_}, DType::i64);
    for (std::size_t i = 0; i < t.size(); ++i) out.data<std::int64_t>()[i] = static_cast<std::int64_t>(t[i]);
    return out;
  }
  std::int64_t classes() const noexcept { return classes_; }
  void reset() { slots_.reset("ConfusionCount"); }

 private:
  static std::int64_t checked(std::int64_t classes) {
    STRATA_REQUIRE(classes >= 1 && classes <= 4096, invalid_argument, "strata.metrics",
                   "ConfusionCount needs 1..4096 classes, got ", classes);
    return classes;
  }
  std::int64_t classes_;
  detail::ReplicaSlots slots_;
};

}  // namespace strata::metrics

/// \file
/// Mean and Sum: streaming metrics of values (a loss, a per-example error) that accumulate per
/// replica inside Strategy::run and are summed across every replica and process when read.
///
/// @code
/// strata::metrics::Mean loss;
/// strategy.run([&](strata::ReplicaContext&, const strata::data::Batch& b) {
///   loss.update(nn::cross_entropy(model(b.x), b.y, nn::Reduction::none), b);  // padding rows left out
/// }, batch);
/// double mean = loss.result(strategy);  // on every process, outside run()
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include <strata/data/dataset.hpp>
#include <strata/metrics/replica_slots.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::metrics {

namespace detail {
/// The sum of rows [0, rows) of `t` (every element of them) in double, on the host.
inline double sum_of_rows(const Tensor& t, std::int64_t rows, const char* metric) {
  STRATA_REQUIRE(t.defined(), invalid_argument, "strata.metrics", metric, ".update: an undefined tensor");
  const Tensor c = t.to(Device::cpu()).contiguous();
  const std::int64_t per_row = c.ndim() == 0 || c.dim(0) == 0 ? (c.ndim() == 0 ? 1 : 0) : c.numel() / c.dim(0);
  const std::int64_t n = rows * per_row;
  double sum = 0;
  ::strata::detail::visit_dtype(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = c.template data<T>();
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]);
  });
  return sum;
}

/// The rows of `values` that are examples of `b`, not its padding (Remainder::pad's rows come last).
inline std::int64_t real_rows(const Tensor& values, const data::Batch& b, const char* metric) {
  STRATA_REQUIRE(values.defined() && values.ndim() >= 1 && values.dim(0) == b.size, invalid_argument,
                 "strata.metrics", metric, ".update(values, batch): values must have one row per row of the batch (",
                 b.size, "), got shape ", values.defined() ? values.shape() : Shape{});
  return b.size - b.padding;
}

/// Elements in rows [0, rows) of `t`.
inline double elements_in_rows(const Tensor& t, std::int64_t rows) {
  if (t.ndim() == 0) return 1;
  return t.dim(0) == 0 ? 0.0 : static_cast<double>(rows) * static_cast<double>(t.numel() / t.dim(0));
}
}  // namespace detail

/// The mean of every value added, weighted (tf.keras.metrics.Mean).
class Mean {
 public:
  Mean() : slots_(2) {}

  /// Adds every element of `values`.
  void update(const Tensor& values) {
    const std::int64_t rows = values.defined() && values.ndim() > 0 ? values.dim(0) : 1;
    add(detail::sum_of_rows(values, rows, "Mean"), detail::elements_in_rows(values, rows));
  }
  /// Adds the elements of `per_example`'s rows that are examples of `batch` (its padding rows
  /// are left out), e.g. a loss with Reduction::none.
  void update(const Tensor& per_example, const data::Batch& batch) {
    const std::int64_t rows = detail::real_rows(per_example, batch, "Mean");
    add(detail::sum_of_rows(per_example, rows, "Mean"), detail::elements_in_rows(per_example, rows));
  }
  /// Adds `value` with `weight`.
  void update(double value, double weight = 1.0) { add(value * weight, weight); }

  /// The weighted mean over every replica and process (NaN before any update): a collective,
  /// called on every process outside run().
  template <class S>
  double result(S& strategy) const {
    const auto t = slots_.read(strategy, "Mean");
    return t[1] == 0 ? NAN : t[0] / t[1];
  }
  void reset() { slots_.reset("Mean"); }

 private:
  void add(double sum, double weight) {
    const std::span<double> s = slots_.mine();
    s[0] += sum;
    s[1] += weight;
  }
  detail::ReplicaSlots slots_;
};

/// The sum of every value added (tf.keras.metrics.Sum).
class Sum {
 public:
  Sum() : slots_(1) {}

  /// Adds every element of `values`.
  void update(const Tensor& values) {
    slots_.mine()[0] += detail::sum_of_rows(values, values.defined() && values.ndim() > 0 ? values.dim(0) : 1, "Sum");
  }
  /// Adds the elements of `per_example`'s rows that are examples of `batch` (not padding).
  void update(const Tensor& per_example, const data::Batch& batch) {
    slots_.mine()[0] += detail::sum_of_rows(per_example, detail::real_rows(per_example, batch, "Sum"), "Sum");
  }
  void update(double value) { slots_.mine()[0] += value; }

  /// The sum over every replica and process: a collective, on every process outside run().
  template <class S>
  double result(S& strategy) const {
    return slots_.read(strategy, "Sum")[0];
  }
  void reset() { slots_.reset("Sum"); }

 private:
  detail::ReplicaSlots slots_;
};

}  // namespace strata::metrics

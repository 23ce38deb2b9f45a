/// \file
/// Learning-rate schedules: the rate as a function of the optimizer's step count. An
/// optimizer with a schedule sets its rate from it before each update (the update that takes
/// steps() from s to s + 1 runs at schedule(s)); every replica and process counts the same
/// steps, so every one applies the same rate, and the count is in the optimizer's saved state,
/// so a resumed run continues the schedule where it stopped.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <utility>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::optim {

class Schedule {
 public:
  using Fn = std::function<double(std::int64_t step)>;

  /// A user's function of the step (0 for the first update).
  explicit Schedule(Fn f) : f_(std::move(f)) { STRATA_CHECK(static_cast<bool>(f_), "Schedule: an empty function"); }

  /// The rate of the update at `step`; a negative or non-finite rate is an error naming it.
  double operator()(std::int64_t step) const {
    const double lr = f_(step);
    STRATA_CHECK(std::isfinite(lr) && lr >= 0.0, "Schedule: the learning rate at step ", step, " is ", lr,
                 ", not a finite non-negative number");
    return lr;
  }

  /// `lr` at every step.
  static Schedule constant(double lr) {
    check_rate("constant", lr);
    return Schedule([lr](std::int64_t) { return lr; });
  }

  /// values[0] before step boundaries[0], values[i] from step boundaries[i - 1] on (PyTorch's
  /// MultiStepLR with explicit values; tf's PiecewiseConstantDecay changes one step later).
  static Schedule piecewise(std::vector<std::int64_t> boundaries, std::vector<double> values) {
    STRATA_CHECK(values.size() == boundaries.size() + 1, "Schedule::piecewise: ", boundaries.size(),
                 " boundaries need ", boundaries.size() + 1, " values, got ", values.size());
    for (std::size_t i = 0; i < boundaries.size(); ++i)
      STRATA_CHECK(boundaries[i] > (i == 0 ? 0 : boundaries[i - 1]), "Schedule::piecewise: boundaries must be "
                   "positive and increasing, got ", boundaries[i], " at position ", i);
    for (double v : values) check_rate("piecewise", v);
    return Schedule([b = std::move(boundaries), v = std::move(values)](std::int64_t step) {
      std::size_t i = 0;
      while (i < b.size() && step >= b[i]) ++i;
      return v[i];
    });
  }

  /// lr * rate^(step / decay_steps), the exponent rounded down with `staircase` (tf's
  /// ExponentialDecay).
  static Schedule exponential(double lr, double rate, std::int64_t decay_steps, bool staircase = false) {
    check_rate("exponential", lr);
    STRATA_CHECK(rate > 0 && std::isfinite(rate), "Schedule::exponential: the decay rate must be positive, got ", rate);
    STRATA_CHECK(decay_steps > 0, "Schedule::exponential: decay_steps must be positive, got ", decay_steps);
    return Schedule([=](std::int64_t step) {
      const double e = static_cast<double>(step) / static_cast<double>(decay_steps);
      return lr * std::pow(rate, staircase ? std::floor(e) : e);
    });
  }

  /// A linear warm-up to `peak` over `warmup_steps` (peak * (step + 1) / warmup_steps, so the
  /// first update moves), then a half cosine from `peak` down to `final_lr` at step
  /// `total_steps`, and `final_lr` after it (the warm-up cosine of nanoGPT and of optax).
  static Schedule cosine(double peak, std::int64_t total_steps, std::int64_t warmup_steps = 0, double final_lr = 0.0) {
    check_rate("cosine", peak);
    check_rate("cosine", final_lr);
    STRATA_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, "Schedule::cosine: needs 0 <= warmup_steps < "
                 "total_steps, got warmup_steps ", warmup_steps, " and total_steps ", total_steps);
    return Schedule([=](std::int64_t step) {
      if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
      if (step >= total_steps) return final_lr;
      const double t = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
      return final_lr + 0.5 * (peak - final_lr) * (1.0 + std::cos(std::numbers::pi * t));
    });
  }

 private:
  static void check_rate(const char* which, double lr) {
    STRATA_CHECK(std::isfinite(lr) && lr >= 0.0, "Schedule::", which, ": a learning rate must be finite and "
                 "non-negative, got ", lr);
  }
  Fn f_;
};

}  // namespace strata::optim

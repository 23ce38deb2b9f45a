/// \file
/// SplitChoice: whether the replicas split the next optimizer update (detail::PartitionedUpdate) or
/// each update all of its copy, decided from what the update phase measurably costs each way.
///
/// Splitting does 1/N of the optimizer's work per replica but writes each share into the
/// other copies, across cores. On a quiet host that write is cheap and the split wins; on a
/// host whose cores pass cache lines slowly (a VM whose virtual CPUs the hypervisor moves
/// apart, a busy socket) the write can cost ten times the update it saves, and every replica
/// updating all of its copy wins (bench/results/performance/split_update.md).
/// So the choice measures both: it runs the way it holds and, now and then, the other one for
/// `probe_steps` steps (a probe), then keeps whichever took less time. Probes come every
/// `probe_every` steps after a switch, twice as far apart each time a probe keeps the way held
/// (up to 8 times), and at once when the way held costs half as much again as when it was
/// last chosen: a host that turns slow is noticed within a few steps.
///
/// Pure policy: it is given the time, so tests drive it with any figures. Every replica must
/// go the same way in a step; one replica decides and hands the choice to the others
/// (PartitionedUpdate).
#pragma once


#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <strata/reducer/options.hpp>

namespace strata::detail {

class SplitChoice {
 public:
  using Options = SplitChoiceOptions;

  SplitChoice() : SplitChoice(Options{}) {}
  explicit SplitChoice(Options o) : o_(o), next_probe_(std::max(o.first_probe, o.warmup + 1)) {
    o_.probe_steps = std::clamp(o_.probe_steps, 2, kMaxProbe);
  }

  /// Records that step `step_` went `split` (or not) and its update phase took `us`
  /// microseconds; returns whether the next step splits.
  bool after(bool split, double us) {
    const int way = split ? 1 : 0;
    const bool measured = step_ >= o_.warmup && !first_after_switch_;
    first_after_switch_ = false;
    if (measured) {
      if (probing_) {
        probe_[static_cast<std::size_t>(probe_n_++)] = us;
      } else {
        double& c = cost_[static_cast<std::size_t>(way)];
        c = known_[static_cast<std::size_t>(way)] ? c * (1 - kAlpha) + us * kAlpha : us;
        known_[static_cast<std::size_t>(way)] = true;
        if (chosen_at_ == 0) chosen_at_ = c;
      }
    }
    ++step_;
    if (probing_ && ++probed_ == o_.probe_steps) {
      end_probe();
    } else if (!probing_ && step_ >= o_.warmup && (step_ >= next_probe_ || dearer())) {
      probing_ = true;  // probe the other way from the next step
      probed_ = probe_n_ = 0;
    }
    const int next = probing_ ? 1 - held_ : held_;
    first_after_switch_ = next != way;
    return next == 1;
  }

  /// The way held (not probing), and the cost measured for each way (µs, NaN until measured).
  bool holds_split() const noexcept { return held_ == 1; }
  double cost(bool split) const noexcept {
    return known_[split ? 1u : 0u] ? cost_[split ? 1u : 0u] : std::nan("");
  }
  int switches() const noexcept { return switches_; }

 private:
  static constexpr double kAlpha = 0.2;  // weight of a new measurement of the way held
  static constexpr double kJump = 1.5;   // the way held costing this much more probes at once
  static constexpr int kMaxProbe = 64;
  static constexpr int kMaxBackoff = 8;

  // Whether the way held costs kJump times what it did when chosen.
  bool dearer() const noexcept { return chosen_at_ > 0 && cost_[static_cast<std::size_t>(held_)] > kJump * chosen_at_; }

  // The probe is over: keep the cheaper way.
  void end_probe() {
    probing_ = false;
    const auto held = static_cast<std::size_t>(held_), other = static_cast<std::size_t>(1 - held_);
    bool switched = false;
    if (probe_n_ > 0) {
      cost_[other] = median(probe_.data(), probe_n_);
      known_[other] = true;
      if (known_[held] && cost_[other] < cost_[held] * (1 - o_.margin)) {
        held_ = 1 - held_;
        switched = true;
        ++switches_;
      }
    }
    backoff_ = switched ? 1 : std::min(backoff_ * 2, kMaxBackoff);
    next_probe_ = step_ + static_cast<long>(o_.probe_every) * backoff_;
    chosen_at_ = known_[static_cast<std::size_t>(held_)] ? cost_[static_cast<std::size_t>(held_)] : 0;
  }

  static double median(double* v, int n) {
    std::sort(v, v + n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

  Options o_;
  long step_ = 0;
  long next_probe_;
  int held_ = 1;  // the split, until measured otherwise
  bool probing_ = false;
  int probed_ = 0, probe_n_ = 0;
  bool first_after_switch_ = false;
  int switches_ = 0;
  int backoff_ = 1;         // probe_every times this between probes
  double chosen_at_ = 0;    // the cost of the way held when it was last chosen (0: not yet)
  std::array<double, 2> cost_{};
  std::array<bool, 2> known_{};
  std::array<double, kMaxProbe> probe_{};
};

}  // namespace strata::detail

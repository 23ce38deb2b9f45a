/// \file
/// StragglerScores: which rank slows a healthy job down, named within a window of steps.
///
///   step()   once a step on every process, outside run(): the step's busy time on this
///            process's first replica thread (the calling thread, replica 0 under every
///            strategy) = the wall time since the last call less what the thread spent
///            waiting on other ranks (collective::detail::thread_wait_seconds: the gradient
///            buckets' waits, barriers, and every collective a policy runs on the thread)
///   every K  the window's median busy time and this rank's best so far, one row per process,
///            gathered through the strategy (strategy.gather: one small collective every K
///            steps); every process then holds the same observe::StragglerReport
///
/// The median over a window keeps one slow step (a page fault, an evaluation between steps, a
/// checkpoint) from naming a rank; a rank slowed throughout a window is named at its end.
/// ParameterServerStrategy runs no common step (its servers answer; docs/parameter_server.md):
/// step() measures nothing there and returns no report.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <strata/collective/detail/wait_policy.hpp>  // thread_wait_seconds
#include <strata/observe/straggler_report.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/strategy/job_timeline.hpp>  // GathersTensors
#include <strata/strategy/replicated.hpp>    // current_local_replica
#include <strata/strategy/strategy.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/factory.hpp>

namespace strata {

struct StragglerOptions {
  int every = 50;          ///< steps a window (K); 0: off
  double threshold = 1.5;  ///< a rank is markedly slow at this multiple of the others' median
};

class StragglerScores {
 public:
  explicit StragglerScores(StragglerOptions o = {}) : o_(o) {
    STRATA_REQUIRE(o.every >= 0, invalid_argument, "strata.straggler", "every must be 0 (off) or a number of steps, got ",
                   o.every);
    STRATA_REQUIRE(o.threshold > 1.0, invalid_argument, "strata.straggler", "the threshold must be above 1, got ",
                   o.threshold);
    window_.reserve(static_cast<std::size_t>(o.every));
    restart();
  }

  bool on() const noexcept { return o_.every > 0; }
  int every() const noexcept { return o_.every; }

  /// Starts the next step's clock now (e.g. after an evaluation that should not count).
  void restart() {
    from_ = Clock::now();
    waited_ = collective::detail::thread_wait_seconds();
  }

  /// The step that just ended (see the file comment); the same call on every process, in the
  /// same steps. Every `every` steps it returns the window's report, the same on every
  /// process; otherwise null.
  template <Strategy S>
  const observe::StragglerReport* step(S& strategy) {
    if constexpr (!detail::GathersTensors<S>) {
      return nullptr;
    } else {
      if (!on()) return nullptr;
      const auto now = Clock::now();
      const double waited = collective::detail::thread_wait_seconds();
      const double busy = std::max(0.0, std::chrono::duration<double>(now - from_).count() - (waited - waited_));
      last_busy_ms_ = 1e3 * busy;
      window_.push_back(last_busy_ms_);
      auto& timeline = observe::Timeline::instance();
      if (timeline.enabled()) timeline.counter("compute ms", now, last_busy_ms_);
      ++steps_;
      const observe::StragglerReport* out = nullptr;
      if (static_cast<int>(window_.size()) >= o_.every) out = &gather_report(strategy);
      restart();  // the gather's own time is not the next step's
      return out;
    }
  }

  /// This process's compute ms in the last step (NaN before the first).
  double last_busy_ms() const noexcept { return last_busy_ms_; }
  /// The latest window's report, if a window has closed.
  const std::optional<observe::StragglerReport>& last_report() const noexcept { return report_; }

 private:
  using Clock = std::chrono::steady_clock;

  template <class S>
  const observe::StragglerReport& gather_report(S& strategy) {
    const double mine = observe::median_of(window_);
    window_.clear();
    best_ = std::min(best_, mine);
    const Shape row{1, 2};
    const Tensor all = strategy.gather(strategy.run([&](ReplicaContext&) {
      if (current_local_replica() != 0) return Tensor::empty(Shape{0, 2}, DType::f64);
      return from_vector(row, std::vector<double>{mine, best_});
    }));
    const auto ranks = static_cast<std::size_t>(all.dim(0));
    const double* v = all.template data<double>();
    std::vector<double> busy(ranks), best(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
      busy[r] = v[2 * r];
      best[r] = v[2 * r + 1];
    }
    report_ = observe::score_ranks(steps_, std::move(busy), best, o_.threshold);
    auto& timeline = observe::Timeline::instance();
    if (timeline.enabled() && ranks > 0) {  // this rank's score against the fastest, on its own track
      const double fastest = *std::min_element(report_->busy_ms.begin(), report_->busy_ms.end());
      timeline.counter("straggler score", Clock::now(), fastest > 0 ? mine / fastest : 1.0);
    }
    return *report_;
  }

  StragglerOptions o_;
  Clock::time_point from_;
  double waited_ = 0;
  double last_busy_ms_ = std::numeric_limits<double>::quiet_NaN();
  double best_ = std::numeric_limits<double>::infinity();
  std::int64_t steps_ = 0;
  std::vector<double> window_;
  std::optional<observe::StragglerReport> report_;
};

}  // namespace strata

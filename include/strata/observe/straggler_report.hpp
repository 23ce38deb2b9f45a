/// \file
/// StragglerReport: which rank of a job is slow, from each rank's compute time a step (its
/// busy time: the step's wall time less the time its thread waited on other ranks). A rank
/// slowed by a CPU hog, a bad host or an injected delay computes longer; the others then wait
/// for it inside their collectives, which their busy time leaves out, so their scores stay
/// where they were. Megatron's straggler detector scores ranks against the fastest the same
/// way. strata::StragglerScores (strategy/straggler_scores.hpp) measures and gathers the
/// figures; this is what is made of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::observe {

/// Every rank's scores over one window of steps.
struct StragglerReport {
  std::int64_t step = 0;            ///< the steps counted when the window closed
  std::vector<double> busy_ms;      ///< each rank's median compute ms a step over the window
  std::vector<double> vs_fastest;   ///< busy_ms[r] over the fastest rank's
  std::vector<double> vs_own_best;  ///< busy_ms[r] over the lowest window median rank r has had
  int slowest = -1;                 ///< the rank with the largest busy_ms (-1: no ranks)
  double slowest_vs_others = NAN;   ///< busy_ms[slowest] over the median of the other ranks'
  bool markedly_slow = false;       ///< slowest_vs_others reached the threshold

  /// "slowest: rank 2, 1.8x the others' median (41.2 ms a step against 22.9)" when a rank is
  /// markedly slow, else "".
  std::string sentence() const {
    if (!markedly_slow) return "";
    const double others = busy_ms[static_cast<std::size_t>(slowest)] / slowest_vs_others;
    char buf[160];
    std::snprintf(buf, sizeof buf, "slowest: rank %d, %.1fx the others' median (%.1f ms a step against %.1f)", slowest,
                  slowest_vs_others, busy_ms[static_cast<std::size_t>(slowest)], others);
    return buf;
  }
};

/// The median of `v` (the mean of the middle two for an even count); NaN for none.
inline double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2.0;
}

/// The report of one window: `busy_ms[r]` rank r's median compute ms a step, `best_ms[r]` the
/// lowest it has had in any window (this one included); a rank is markedly slow when its
/// figure is at least `threshold` times the median of the others' (with one rank, never).
inline StragglerReport score_ranks(std::int64_t step, std::vector<double> busy_ms, const std::vector<double>& best_ms,
                                   double threshold) {
  STRATA_REQUIRE(busy_ms.size() == best_ms.size(), invalid_argument, "strata.observe.straggler", "busy_ms has ",
                 busy_ms.size(), " ranks and best_ms ", best_ms.size());
  STRATA_REQUIRE(threshold > 1.0, invalid_argument, "strata.observe.straggler",
                 "the straggler threshold must be above 1, got ", threshold);
  StragglerReport r;
  r.step = step;
  r.busy_ms = std::move(busy_ms);
  const std::size_t n = r.busy_ms.size();
  if (n == 0) return r;
  const double fastest = *std::min_element(r.busy_ms.begin(), r.busy_ms.end());
  r.vs_fastest.resize(n);
  r.vs_own_best.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    // A rank that computed nothing measurable (0 ms) scores 1 against itself or another such.
    r.vs_fastest[k] = fastest > 0 ? r.busy_ms[k] / fastest : 1.0;
    r.vs_own_best[k] = best_ms[k] > 0 ? r.busy_ms[k] / best_ms[k] : 1.0;
  }
  r.slowest = static_cast<int>(std::max_element(r.busy_ms.begin(), r.busy_ms.end()) - r.busy_ms.begin());
  if (n == 1) return r;
  std::vector<double> others;
  for (std::size_t k = 0; k < n; ++k)
    if (static_cast<int>(k) != r.slowest) others.push_back(r.busy_ms[k]);
  const double m = median_of(std::move(others));
  r.slowest_vs_others = m > 0 ? r.busy_ms[static_cast<std::size_t>(r.slowest)] / m : 1.0;
  r.markedly_slow = r.slowest_vs_others >= threshold;
  return r;
}

}  // namespace strata::observe

/// \file
/// RowSplit and RowBalance: how MirroredStrategy divides a global batch's rows between its
/// replica threads. `even` gives each the same count (to within a row). `measured` gives each
/// a count in proportion to how fast it has been: on a host whose cores run at different
/// speeds for a while (another job, a hypervisor's neighbour), the faster replicas otherwise
/// wait for the slowest at every all-reduce.
///
/// The split changes which replica computes which example, not what the step computes: each
/// replica's loss is scaled by the global batch (Batch::global_size), so the sum over replicas
/// of their gradients is the gradient of the global-batch mean however the rows are divided
/// (up to the order of float additions; the equivalence tests hold it within 1e-5 of one
/// device). Two things do change, hence opt-in: the result's last bits depend on timing, so
/// two runs are no longer bit-identical; and statistics over a replica's own rows (BatchNorm)
/// are over counts that differ.
///
/// Pure policy: it is given each replica's rows and busy seconds in a step (the step's wall
/// time on the replica's thread less its waits for the others, collective::detail::
/// thread_wait_seconds), so tests drive it with any figures. The speed it keeps is an
/// exponential average of rows per busy second; the shares follow the speeds. With a cost per
/// step that does not scale with the rows, the shares still converge: they stop moving where
/// every replica is busy for the same time, which is what removes the wait.
#pragma once


#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <strata/runtime/process.hpp>  // env
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>
#include <strata/strategy/row_split.hpp>

namespace strata::detail {

class RowBalance {
 public:
  static constexpr int kWarmup = 3;          ///< first steps not measured (first touches)
  static constexpr double kSmoothing = 0.25;  ///< weight of a step's speed in the average
  static constexpr double kMaxSkew = 0.5;     ///< a share stays within (1 ± this) / replicas
  static constexpr double kStay = 0.75;       ///< rows a boundary may be off before it moves

  explicit RowBalance(int replicas)
      : speed_(static_cast<std::size_t>(replicas), 0.0), share_(static_cast<std::size_t>(replicas), 1.0 / replicas),
        last_(static_cast<std::size_t>(replicas) + 1, 0) {
    STRATA_CHECK(replicas >= 1, "RowBalance: replicas must be at least 1, got ", replicas);
  }

  /// Replica r's share of the rows (the shares sum to 1).
  double share(int r) const { return share_.at(static_cast<std::size_t>(r)); }

  /// Row boundaries for a batch of `rows` rows: replica r takes [out[r], out[r + 1]). Every
  /// replica gets at least one row when there are enough for that; a batch of fewer than four
  /// rows per replica is divided evenly. A boundary moves only once its exact place is more than
  /// kStay rows from where it is, so that noise in the timing does not reshape every step.
  void bounds(std::int64_t rows, std::span<std::int64_t> out) {
    const auto n = static_cast<std::int64_t>(speed_.size());
    STRATA_CHECK(out.size() == speed_.size() + 1, "RowBalance::bounds: ", out.size(), " boundaries for ", n,
                 " replicas");
    STRATA_CHECK(rows >= 0, "RowBalance::bounds: ", rows, " rows");
    if (rows < 4 * n) {
      for (std::int64_t r = 0; r <= n; ++r) out[static_cast<std::size_t>(r)] = rows * r / n;
      return;
    }
    bool stay = rows == last_rows_;
    double cum = 0;
    out[0] = 0;
    for (std::int64_t r = 1; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      cum += share_[ur - 1];
      const double exact = cum * static_cast<double>(rows);
      stay = stay && std::abs(exact - static_cast<double>(last_[ur])) <= kStay;
      // at least one row for this replica and for each one after it
      out[ur] = std::clamp(static_cast<std::int64_t>(std::llround(exact)), out[ur - 1] + 1, rows - (n - r));
    }
    out[static_cast<std::size_t>(n)] = rows;
    if (stay) {
      std::copy(last_.begin(), last_.end(), out.begin());
    } else {
      std::copy(out.begin(), out.end(), last_.begin());
      last_rows_ = rows;
    }
  }

  /// After a step in which replica r had rows[r] rows and was busy busy_seconds[r]: updates
  /// the speeds and the shares. A step with a replica that had no rows or no measurable busy
  /// time changes nothing.
  void observe(std::span<const std::int64_t> rows, std::span<const double> busy_seconds) {
    STRATA_CHECK(rows.size() == speed_.size() && busy_seconds.size() == speed_.size(),
                 "RowBalance::observe: one figure per replica");
    for (std::size_t r = 0; r < speed_.size(); ++r)
      if (rows[r] <= 0 || !(busy_seconds[r] > 0) || !std::isfinite(busy_seconds[r])) return;
    if (++steps_ <= kWarmup) return;
    const bool first = steps_ == kWarmup + 1;
    double total = 0;
    for (std::size_t r = 0; r < speed_.size(); ++r) {
      const double s = static_cast<double>(rows[r]) / busy_seconds[r];
      speed_[r] = first ? s : (1 - kSmoothing) * speed_[r] + kSmoothing * s;
      total += speed_[r];
    }
    // share r = clamp(scale * speed r / total, lo, hi), with the scale that makes them sum to 1
    // (found by bisection: the sum grows with the scale, and scale 1 / (1 - kMaxSkew) already
    // puts every share at or above its unclamped value)
    const double even = 1.0 / static_cast<double>(speed_.size());
    const double lo = even * (1 - kMaxSkew), hi = even * (1 + kMaxSkew);
    auto shares_sum = [&](double scale) {
      double sum = 0;
      for (std::size_t r = 0; r < speed_.size(); ++r) sum += std::clamp(scale * speed_[r] / total, lo, hi);
      return sum;
    };
    double below = 0, above = 1 / (1 - kMaxSkew) + 1;
    for (int i = 0; i < 60; ++i) {
      const double mid = (below + above) / 2;
      (shares_sum(mid) < 1 ? below : above) = mid;
    }
    for (std::size_t r = 0; r < speed_.size(); ++r) share_[r] = std::clamp(above * speed_[r] / total, lo, hi);
  }

 private:
  std::vector<double> speed_;  // rows per busy second, averaged
  std::vector<double> share_;
  std::vector<std::int64_t> last_;  // the boundaries handed out last, for last_rows_ rows
  std::int64_t last_rows_ = -1;
  std::int64_t steps_ = 0;
};

}  // namespace strata::detail

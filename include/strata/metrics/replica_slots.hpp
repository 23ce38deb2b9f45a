/// \file
/// ReplicaSlots: the state of a streaming metric, one slot per local replica, summed when the
/// metric is read (tf.distribute's sync-on-read variables). Inside Strategy::run each replica
/// thread adds to its own slot (replica_info().local_replica), so an update takes no lock and
/// no collective; a read sums the local slots and then, through the strategy, the processes'
/// sums (`strategy.sum_across_processes`), so every process reads the figure of the whole job.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/support/replica_thread.hpp>

namespace strata::metrics::detail {

class ReplicaSlots {
 public:
  /// `width` doubles per replica; each slot starts on its own cache line, so replica threads
  /// adding at once do not share lines.
  explicit ReplicaSlots(std::size_t width)
      : width_(width), stride_((width + 7) / 8 * 8), v_(kMaxLocalReplicas * stride_, 0.0) {}

  std::size_t width() const noexcept { return width_; }

  /// The calling replica's slot (replica 0's outside run()).
  std::span<double> mine() noexcept {
    return {v_.data() + static_cast<std::size_t>(replica_info().local_replica) * stride_, width_};
  }

  /// Zeroes every slot; between steps, as a read is.
  void reset(const char* metric) {
    check_between_steps(metric, "reset()");
    std::fill(v_.begin(), v_.end(), 0.0);
  }

  /// Every replica's slot summed, across every process of `strategy`'s job: a collective, so
  /// every process reads (in the same order as its other collectives), outside run().
  template <class S>
  std::vector<double> read(S& strategy, const char* metric) const {
    check_between_steps(metric, "result()");
    std::vector<double> total(width_, 0.0);
    for (std::size_t r = 0; r < kMaxLocalReplicas; ++r)
      for (std::size_t i = 0; i < width_; ++i) total[i] += v_[r * stride_ + i];
    strategy.sum_across_processes(std::span<double>(total));
    return total;
  }

 private:
  static void check_between_steps(const char* metric, const char* what) {
    STRATA_REQUIRE(!replica_info().in_step, invalid_argument, "strata.metrics", metric, ".", what,
                   " inside Strategy::run: the other replicas may be updating it; read and reset metrics between "
                   "steps, on every process");
  }

  std::size_t width_, stride_;
  std::vector<double> v_;
};

}  // namespace strata::metrics::detail

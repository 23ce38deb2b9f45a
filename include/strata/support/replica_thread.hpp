/// \file
/// What a replica's thread knows, in one place: which local replica it runs, whether it is
/// inside a step and how many replicas are in sync with it, which rows of which step it runs,
/// and how the layers add statistics over the replicas in sync. The strategies' run() sets it
/// on each replica thread for the replica function's duration through the scopes below; the
/// layers below the strategies read it (a loss checks its reduction against the replicas in
/// sync, Dropout keys its numbers by the rows, SyncBatchNorm sums its statistics), as
/// tf.distribute code reads get_replica_context().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include <strata/support/check.hpp>

namespace strata {

/// The most replicas one process runs (one per local device or thread).
inline constexpr std::size_t kMaxLocalReplicas = 16;

/// Adds a layer's statistics over the replicas in sync (nn::SyncBatchNorm's batch sums): a
/// strategy with more than one replica in sync sets one for the replica function's duration.
class StatisticsSum {
 public:
  /// Adds `values` over the replicas in sync, in place: every replica calls it with the same
  /// length at the same point of its step.
  virtual void sum(std::span<double> values) = 0;

 protected:
  ~StatisticsSum() = default;
};

struct ReplicaInfo {
  int local_replica = 0;     ///< this process's replica the thread runs (0 outside run())
  bool in_step = false;      ///< inside Strategy::run
  int replicas_in_sync = 1;  ///< replicas whose gradients are summed in this step, across every process
  // Inside Strategy::run(fn, batch): which rows of which step the replica runs, what a layer
  // that draws random numbers keys them by (nn::Dropout), so that they do not depend on how
  // the step's rows are split.
  bool has_batch = false;
  std::int64_t epoch = 0, batch_index = 0;  ///< the batch's Batch::epoch and Batch::index
  std::int64_t first_row = 0;               ///< Batch::global_offset: the replica's first row among the step's
  StatisticsSum* statistics = nullptr;      ///< null outside a step with several replicas in sync
};

namespace detail {
inline ReplicaInfo& replica_info_slot() noexcept {
  thread_local ReplicaInfo info;
  return info;
}
}  // namespace detail

/// The calling thread's replica: {0, false, 1} outside Strategy::run.
inline const ReplicaInfo& replica_info() noexcept { return detail::replica_info_slot(); }

/// The local replica the calling thread runs: its index among this process's replicas.
inline int current_local_replica() noexcept { return replica_info().local_replica; }

namespace detail {
/// Each scope sets its part of the calling thread's ReplicaInfo for its lifetime and puts the
/// whole record back as it found it.
class ReplicaInfoScope {
 public:
  ReplicaInfoScope(const ReplicaInfoScope&) = delete;
  ReplicaInfoScope& operator=(const ReplicaInfoScope&) = delete;

 protected:
  ReplicaInfoScope() noexcept : saved_(replica_info_slot()) {}
  ~ReplicaInfoScope() { replica_info_slot() = saved_; }

 private:
  ReplicaInfo saved_;
};

/// The thread runs local replica `r` (inside a step when `step`, with `in_sync` replicas in
/// sync); the rest of the record starts afresh.
class ReplicaScope : ReplicaInfoScope {
 public:
  explicit ReplicaScope(int r, bool step = false, int in_sync = 1) noexcept {
    replica_info_slot() = ReplicaInfo{r, step, in_sync};
  }
};

/// The replica runs rows [first_row, ...) of the step (epoch, index).
class BatchScope : ReplicaInfoScope {
 public:
  BatchScope(std::int64_t epoch, std::int64_t index, std::int64_t first_row) noexcept {
    ReplicaInfo& info = replica_info_slot();
    info.has_batch = true;
    info.epoch = epoch;
    info.batch_index = index;
    info.first_row = first_row;
  }
};

/// Rejects a cross-replica call (reduce, run) made from inside a replica's step, where it
/// would wait for replicas that are themselves inside their steps.
inline void check_cross_replica(const char* what) {
  STRATA_CHECK(!replica_info().in_step, what, " called inside Strategy::run: it is a cross-replica operation; "
               "call it on the strategy outside run(), or use ReplicaContext::all_reduce inside");
}

/// The layers add statistics over the replicas in sync through `sum`.
class StatisticsSumScope : ReplicaInfoScope {
 public:
  explicit StatisticsSumScope(StatisticsSum& sum) noexcept { replica_info_slot().statistics = &sum; }
};
}  // namespace detail

}  // namespace strata

/// \file
/// ReplicaInfo: what the calling thread runs as a replica of a strategy, for every layer.
/// The strategies' run() sets it on each replica thread for the replica function's duration
/// (strategies' detail::ReplicaScope); the layers below the strategies read it (a loss checks
/// its reduction against the replicas in sync), as tf.distribute code reads
/// get_replica_context().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace strata {

/// The most replicas one process runs (one per local device or thread).
inline constexpr std::size_t kMaxLocalReplicas = 16;

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
  /// Adds `values` over the replicas in sync, in place, for a layer whose statistics span the
  /// global batch (nn::SyncBatchNorm): every replica calls it with the same length at the same
  /// point of its step. Set by strategies with more than one replica in sync; null otherwise.
  void (*sum_over_replicas)(void* context, std::span<double> values) = nullptr;
  void* sum_context = nullptr;
};

namespace detail {
inline ReplicaInfo& replica_info_slot() noexcept {
  thread_local ReplicaInfo info;
  return info;
}
}  // namespace detail

/// The calling thread's replica: {0, false, 1} outside Strategy::run.
inline const ReplicaInfo& replica_info() noexcept { return detail::replica_info_slot(); }

}  // namespace strata

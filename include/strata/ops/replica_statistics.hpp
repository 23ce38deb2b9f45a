/// \file
/// Batch statistics summed over the replicas in sync, for batch_norm: at once (SyncBatchNorm
/// normalises by them), or at the end of the replica's step (a per-replica BatchNorm's running
/// statistics, which nothing in the step reads): every norm of the step then meets the other
/// replicas once, in one sum, instead of once a norm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/support/replica_thread.hpp>  // replica_info: the replicas' sum
#include <strata/tensor/tensor.hpp>

namespace strata::ops::detail {

/// Adds `values` over the replicas in sync (when there are several): the sums of this
/// replica's rows become the global batch's.
inline void sum_over_replicas(std::span<double> values) {
  const ReplicaInfo& info = replica_info();
  if (info.replicas_in_sync <= 1) return;
  STRATA_CHECK(info.statistics != nullptr,
               "batch_norm: this strategy gives its replicas no way to combine batch statistics");
  info.statistics->sum(values);
}

/// running = (1 - momentum) running + momentum batch, per channel, from the batch's sums
/// `global` = [Σx (C), Σx² (C), count], the variance unbiased (PyTorch's rule). A batch of one
/// value a channel or none leaves them. Device tensors are updated through host copies.
inline void update_running_statistics(const Tensor& running_mean, const Tensor& running_var, double momentum,
                                      std::span<const double> global) {
  const auto C = static_cast<std::size_t>(running_mean.numel());
  const double total = global[2 * C];
  if (total <= 1) return;
  const bool host = running_mean.device().kind == DeviceKind::cpu;
  const Tensor rm = host ? running_mean : running_mean.to(Device::cpu());
  const Tensor rv = host ? running_var : running_var.to(Device::cpu());
  strata::detail::visit_floating(rm.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    T* rmp = rm.template data<T>();
    T* rvp = rv.template data<T>();
    for (std::size_t c = 0; c < C; ++c) {
      const double m = global[c] / total;
      const double var = std::max(0.0, global[C + c] / total - m * m);
      rmp[c] = static_cast<T>((1 - momentum) * rmp[c] + momentum * m);
      rvp[c] = static_cast<T>((1 - momentum) * rvp[c] + momentum * var * total / (total - 1));
    }
  });
  if (host) return;
  Tensor(running_mean).copy_(rm);  // (handles: the caller's tensors)
  Tensor(running_var).copy_(rv);
}

/// The replica's running-statistics updates waiting for the end of its step (or for an
/// evaluation-mode norm, which reads them): each norm's local sums [Σx, Σx², count], summed
/// over the replicas in one call and applied in the order the norms ran. Per thread: a
/// replica runs on one thread. Steady steps do not allocate (the lists keep their capacity).
class PendingRunningStatistics {
 public:
  /// Starts deferring (the strategy's replica scope, when several replicas are in sync).
  void begin() {
    discard();
    deferring_ = true;
  }
  /// Stops deferring and forgets what waits (a step that threw: the replicas do not meet).
  void end() {
    discard();
    deferring_ = false;
  }
  bool deferring() const noexcept { return deferring_; }
  bool empty() const noexcept { return entries_.empty(); }

  /// Queues an update of (running_mean, running_var) from this replica's sums `local`.
  void add(const Tensor& running_mean, const Tensor& running_var, double momentum, std::span<const double> local) {
    entries_.push_back({running_mean, running_var, momentum, sums_.size(), local.size()});
    sums_.insert(sums_.end(), local.begin(), local.end());
  }

  /// Sums every queued norm's statistics over the replicas (one call, every replica at the
  /// same point with the same norms) and applies the updates in order.
  void settle() {
    if (entries_.empty()) return;
    sum_over_replicas(sums_);
    for (const Entry& e : entries_)
      update_running_statistics(e.mean, e.var, e.momentum, std::span<const double>(sums_).subspan(e.offset, e.size));
    discard();
  }

 private:
  struct Entry {
    Tensor mean, var;
    double momentum;
    std::size_t offset, size;
  };
  void discard() {
    entries_.clear();
    sums_.clear();
  }
  std::vector<Entry> entries_;
  std::vector<double> sums_;
  bool deferring_ = false;
};

inline PendingRunningStatistics& pending_running_statistics() {
  thread_local PendingRunningStatistics pending;
  return pending;
}

}  // namespace strata::ops::detail

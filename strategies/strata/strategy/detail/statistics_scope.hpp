/// \file
/// How a replica's step runs with the layers told what they need of it: the statistics hook
/// through the replica's context (SyncBatchNorm, the deferred running statistics) and the rows
/// it runs (Dropout's key).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <strata/collective/reduce_op.hpp>
#include <strata/data/dataset.hpp>
#include <strata/ops/replica_statistics.hpp>  // the deferred running statistics
#include <strata/strategy/replica_context.hpp>  // the sums go through its all_reduce
#include <strata/support/replica_thread.hpp>   // StatisticsSum, StatisticsSumScope, BatchScope
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// Lets the layers add statistics over the replicas in sync through the replica's context
/// (ReplicaInfo::statistics, for nn::SyncBatchNorm), for the scope's lifetime. The context's
/// all_reduce follows the gradient buckets already in flight, so a sum issued in the middle of
/// backward keeps every replica's collectives in one order. The per-replica norms' running
/// statistics wait until settle(), at the end of the replica's step: one sum for all of them
/// (ops::detail::PendingRunningStatistics); a step that throws drops them.
class StatisticsScope final : StatisticsSum {
 public:
  explicit StatisticsScope(ReplicaContext& ctx) : ctx_(ctx), hook_(*this) { ops::detail::pending_running_statistics().begin(); }
  ~StatisticsScope() { ops::detail::pending_running_statistics().end(); }
  StatisticsScope(const StatisticsScope&) = delete;
  StatisticsScope& operator=(const StatisticsScope&) = delete;

  /// The step's running-statistics updates, summed over the replicas and applied.
  void settle() { ops::detail::pending_running_statistics().settle(); }

 private:
  void sum(std::span<double> values) override {
    Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::f64);  // pooled: no allocation
    std::memcpy(t.raw_data(), values.data(), values.size_bytes());
    ctx_.all_reduce(ReduceOp::Sum, t);
    std::memcpy(values.data(), t.raw_data(), values.size_bytes());
  }
  ReplicaContext& ctx_;
  StatisticsSumScope hook_;
};

/// fn(ctx), with the layers told how to combine statistics across the replicas in sync
/// (StatisticsScope); the step's deferred statistics settle after fn returns.
template <class F, class Ctx>
decltype(auto) run_with_statistics(F& fn, Ctx& ctx) {
  StatisticsScope statistics(ctx);
  if constexpr (std::is_void_v<decltype(fn(ctx))>) {
    fn(ctx);
    statistics.settle();
  } else {
    decltype(auto) out = fn(ctx);
    statistics.settle();
    return out;
  }
}

/// fn(ctx, rows), with the layers told which rows of which step they run (BatchScope), and
/// run_with_statistics.
template <class F, class Ctx>
decltype(auto) run_on_rows(F& fn, Ctx& ctx, const data::Batch& rows) {
  BatchScope scope(rows.epoch, rows.index, rows.global_offset);
  auto on_rows = [&](Ctx& c) -> decltype(auto) { return fn(c, rows); };
  return run_with_statistics(on_rows, ctx);
}

}  // namespace strata::detail

/// \file
/// What the strategies with several replicas in one process share: making one copy of a
/// scoped object per replica, splitting a global batch into the replicas' rows, and reducing
/// PerReplica values across the local replicas.
#pragma once

#include <concepts>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/detail/reduce.hpp>  // combine, divide
#include <strata/collective/reduce_op.hpp>
#include <strata/data/dataset.hpp>
#include <strata/data/pipeline.hpp>   // split_begin
#include <strata/nn/init.hpp>         // default_generator
#include <strata/ops/replica_statistics.hpp>  // the deferred running statistics
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>  // StatisticsScope: the sums go through all_reduce
#include <strata/strategy/replicated.hpp>

namespace strata::detail {

/// Objects with a parameter list (modules): their copies are synchronised.
template <class T>
concept HasParameters = requires(const T& t) {
  { t.parameters() } -> std::convertible_to<const std::vector<Tensor>&>;
};

/// A model with buffers (batch norm's running statistics): they move with its parameters.
template <class T>
concept HasBuffers = requires(const T& t) {
  { t.buffers() } -> std::convertible_to<const std::vector<Tensor>&>;
};

/// `n` results of `factory`, the r-th made with replica r current (so a factory that reads a
/// Replicated object, like an optimizer over model.parameters(), reads replica r's copy).
/// Each call starts from the same state of the default generator, which ends where one call
/// would leave it; the copies' parameters are then set equal to replica 0's.
template <class F>
auto make_replicas(F& factory, int n) {
  using T = std::invoke_result_t<F&>;
  static_assert(std::is_object_v<T> && !std::is_const_v<T>, "scope(): the factory must return an object by value");
  std::vector<std::unique_ptr<T>> copies;
  const Generator start = default_generator();
  Generator after = start;
  for (int r = 0; r < n; ++r) {
    ReplicaScope scope(r);
    default_generator() = start;
    copies.push_back(std::make_unique<T>(factory()));
    if (r == 0) after = default_generator();
  }
  default_generator() = after;
  if constexpr (HasParameters<T>) {
    NoGradGuard no_grad;
    const std::vector<Tensor>& p0 = copies[0]->parameters();
    for (int r = 1; r < n; ++r) {
      const std::vector<Tensor>& pr = copies[static_cast<std::size_t>(r)]->parameters();
      STRATA_CHECK_EQ(pr.size(), p0.size(), "scope(): the factory made models with different parameter lists");
      for (std::size_t k = 0; k < p0.size(); ++k) {
        STRATA_CHECK(pr[k].shape() == p0[k].shape() && pr[k].dtype() == p0[k].dtype(),
                     "scope(): the factory made models with different parameter shapes");
        Tensor dst = pr[k];
        dst.copy_(p0[k]);
      }
    }
  }
  return copies;
}

/// Rows [lo, hi) of a global batch, as one replica's batch (views, no copy).
inline data::Batch batch_rows(const data::Batch& global, std::int64_t lo, std::int64_t hi) {
  data::Batch b;
  b.x = data::slice_rows(global.x, lo, hi);
  if (global.y.defined()) b.y = data::slice_rows(global.y, lo, hi);
  for (const Tensor& t : global.more_inputs) b.more_inputs.push_back(data::slice_rows(t, lo, hi));
  b.size = hi - lo;
  const std::int64_t real_end = global.size - global.padding;  // padding rows come last
  b.padding = hi - std::max(lo, std::min(hi, real_end));
  b.global_size = global.global_size;
  b.epoch = global.epoch;
  b.index = global.index;
  b.global_offset = global.global_offset + lo;
  return b;
}

/// Lets the layers add statistics over the replicas in sync through the replica's context
/// (ReplicaInfo::sum_over_replicas, for nn::SyncBatchNorm), for the scope's lifetime. The
/// context's all_reduce follows the gradient buckets already in flight, so a sum issued in
/// the middle of backward keeps every replica's collectives in one order. The per-replica
/// norms' running statistics wait until settle(), at the end of the replica's step: one sum
/// for all of them (ops::detail::PendingRunningStatistics); a step that throws drops them.
class StatisticsScope {
 public:
  explicit StatisticsScope(ReplicaContext& ctx) : saved_(replica_info_slot()) {
    ReplicaInfo& info = replica_info_slot();
    info.sum_over_replicas = &sum;
    info.sum_context = &ctx;
    ops::detail::pending_running_statistics().begin();
  }
  ~StatisticsScope() {
    ops::detail::pending_running_statistics().end();
    replica_info_slot() = saved_;
  }
  StatisticsScope(const StatisticsScope&) = delete;
  StatisticsScope& operator=(const StatisticsScope&) = delete;

  /// The step's running-statistics updates, summed over the replicas and applied.
  void settle() { ops::detail::pending_running_statistics().settle(); }

 private:
  static void sum(void* ctx, std::span<double> values) {
    Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::f64);  // pooled: no allocation
    std::memcpy(t.raw_data(), values.data(), values.size_bytes());
    static_cast<ReplicaContext*>(ctx)->all_reduce(ReduceOp::Sum, t);
    std::memcpy(values.data(), t.raw_data(), values.size_bytes());
  }
  ReplicaInfo saved_;
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

/// Local replica r's rows of a global batch split evenly between n replicas.
inline data::Batch replica_rows(const data::Batch& global, int r, int n) {
  return batch_rows(global, data::detail::split_begin(global.size, r, n), data::detail::split_begin(global.size, r + 1, n));
}

/// The replicas' tensors concatenated along axis 0 (every other extent and the dtype equal).
inline Tensor concat_rows(const PerReplica<Tensor>& v) {
  STRATA_CHECK(v.size() > 0 && v[0].defined() && v[0].ndim() >= 1, "gather: needs tensors with an axis 0");
  Shape s = v[0].shape();
  std::int64_t rows = 0;
  for (std::size_t r = 0; r < v.size(); ++r) {
    Shape sr = v[r].shape();
    STRATA_CHECK(sr.ndim() == s.ndim() && v[r].dtype() == v[0].dtype(), "gather: replica ", r, " returned ",
                 name_of(v[r].dtype()), " ", sr, ", replica 0 ", name_of(v[0].dtype()), " ", s);
    sr[0] = s[0];
    STRATA_CHECK(sr == s, "gather: replica ", r, " returned shape ", v[r].shape(), ", replica 0 ", v[0].shape(),
                 " (only axis 0 may differ)");
    rows += v[r].dim(0);
  }
  s[0] = rows;
  Tensor out = Tensor::empty(s, v[0].dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& t : v) {
    const Tensor c = t.contiguous();
    if (c.nbytes() == 0) continue;  // an empty replica's rows (its data pointer may be null)
    std::memcpy(dst, c.raw_data(), c.nbytes());
    dst += c.nbytes();
  }
  return out;
}

/// The elementwise reduction of the local replicas' values (Mean: over `denominator` values),
/// with the collectives' own reduction kernels.
inline double reduce_local(ReduceOp op, const PerReplica<double>& v, std::size_t denominator) {
  STRATA_CHECK(v.size() > 0, "reduce of an empty PerReplica");
  double acc = v[0];
  for (std::size_t r = 1; r < v.size(); ++r) collective::detail::combine<double>(op, 1, &acc, &v[r]);
  if (op == ReduceOp::Mean) collective::detail::divide<double>(1, &acc, static_cast<int>(denominator));
  return acc;
}
inline Tensor reduce_local(ReduceOp op, const PerReplica<Tensor>& v, std::size_t denominator) {
  STRATA_CHECK(v.size() > 0, "reduce of an empty PerReplica");
  NoGradGuard no_grad;
  Tensor acc = v[0].contiguous().clone();
  strata::detail::visit_floating(acc.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    const auto n = static_cast<std::size_t>(acc.numel());
    for (std::size_t r = 1; r < v.size(); ++r) {
      STRATA_CHECK(v[r].shape() == acc.shape() && v[r].dtype() == acc.dtype(), "reduce: replica ", r,
                   " returned shape ", v[r].shape(), ", replica 0 ", acc.shape());
      const Tensor c = v[r].contiguous();
      collective::detail::combine<T>(op, n, acc.template data<T>(), c.template data<T>());
    }
    if (op == ReduceOp::Mean) collective::detail::divide<T>(n, acc.template data<T>(), static_cast<int>(denominator));
  });
  return acc;
}

}  // namespace strata::detail

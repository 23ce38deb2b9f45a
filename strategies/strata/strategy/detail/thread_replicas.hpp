/// \file
/// ThreadReplicas<Derived>: what the strategies with all replicas as threads of one process
/// (MirroredStrategy, CentralStorageStrategy) share — the InProcess group and the replica
/// threads, distribute, run, reduce and gather. A strategy supplies its replica context:
/// `with_context(r, f)` builds replica r's context on the stack and calls f(ctx). Replicas on
/// devices (set_devices) get their rows there in run(), and their values back on the host in
/// reduce() and gather().
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>  // hardware_concurrency
#include <type_traits>
#include <vector>

#include <strata/collective/detail/wait_policy.hpp>  // thread_wait_seconds
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/detail/local_reduction.hpp>
#include <strata/strategy/detail/replica_rows.hpp>
#include <strata/strategy/detail/statistics_scope.hpp>
#include <strata/strategy/input_context.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/detail/replica_pool.hpp>
#include <strata/strategy/detail/row_balance.hpp>
#include <strata/tensor/device.hpp>

namespace strata::detail {

template <class Derived>
class ThreadReplicas : RejectsReplicaValues, public TakesArithmeticValues<ThreadReplicas<Derived>> {
 public:
  ThreadReplicas(const ThreadReplicas&) = delete;
  ThreadReplicas& operator=(const ThreadReplicas&) = delete;

  int num_replicas_in_sync() const noexcept { return n_; }
  bool is_chief() const noexcept { return true; }

  /// The input pipeline; each batch is a global batch that run() splits. It prefetches ahead
  /// on a thread of its own only when a core is left for that thread: with a replica on every
  /// core the producer preempts one replica each step, and the others wait for it at the first
  /// all-reduce (2 replicas on 2 cores: 4 % fewer examples/s than assembling the batch
  /// inline). Assembled inline, the batch's rows are copied by all the replica threads at
  /// once. A depth the user set is kept.
  data::Pipeline distribute(const data::Pipeline& p) const {
    if (p.options().prefetch > 0) return p;
    if (std::thread::hardware_concurrency() > static_cast<unsigned>(n_)) return p.prefetch(2);
    return n_ > 1 ? p.parallel_rows(std::make_shared<ReplicaPoolRows>(pool_)) : p;
  }

  /// The input `fn(context)` returns, this process being the one worker (InputContext).
  template <InputFunction F>
  data::Pipeline distribute(F&& fn) const {
    return distribute(fn(InputContext{1, 0, n_}));
  }

  /// Runs fn(ctx, rows) on every replica at once, each with its contiguous share of the
  /// global batch's rows (even, or by measured speed: RowSplit); returns the replicas' results.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    using R = std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>;
    if (!balance_)
      return run_replicas<R>([&](ReplicaContext& ctx, int r) { return run_on_rows(fn, ctx, placed(r, replica_rows(batch, r, n_))); });
    balance_->bounds(batch.size, bounds_);
    auto timed = [&](ReplicaContext& ctx, int r) {
      const auto ur = static_cast<std::size_t>(r);
      const double waited = collective::detail::thread_wait_seconds();
      const auto from = std::chrono::steady_clock::now();
      struct Busy {  // a destructor: fn may return a value
        double& out;
        double waited;
        std::chrono::steady_clock::time_point from;
        ~Busy() {
          out = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count() -
                (collective::detail::thread_wait_seconds() - waited);
        }
      } busy{busy_[ur], waited, from};
      return run_on_rows(fn, ctx, placed(r, batch_rows(batch, bounds_[ur], bounds_[ur + 1])));
    };
    if constexpr (std::is_void_v<R>) {
      run_replicas<R>(timed);
      observe_rows();
    } else {
      auto out = run_replicas<R>(timed);
      observe_rows();
      return out;
    }
  }
  /// Runs fn(ctx) on every replica at once.
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_replicas<std::invoke_result_t<F&, ReplicaContext&>>(
        [&](ReplicaContext& ctx, int) { return run_with_statistics(fn, ctx); });
  }

  /// The replicas' values concatenated along axis 0, in replica order (tf's Strategy.gather).
  Tensor gather(const PerReplica<Tensor>& v) const {
    check_cross_replica("gather()");
    check_size(v.size(), "gather");
    return devices_.empty() ? concat_rows(v) : concat_rows(on_host(v));
  }
  /// The reduction across all replicas (Mean: over num_replicas_in_sync values).
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& v) const {
    check_cross_replica("reduce()");
    check_size(v.size(), "reduce");
    const auto n = static_cast<std::size_t>(n_);
    return devices_.empty() ? reduce_local(op, v, n) : reduce_local(op, on_host(v), n);
  }
  using detail::RejectsReplicaValues::gather;  // a replica's own value: a compile-time error
  using detail::RejectsReplicaValues::reduce;
  using TakesArithmeticValues<ThreadReplicas<Derived>>::reduce;  // int64_t, float, ...
  using TakesArithmeticValues<ThreadReplicas<Derived>>::gather;
  double reduce(ReduceOp op, const PerReplica<double>& v) const {
    check_cross_replica("reduce()");
    check_size(v.size(), "reduce");
    return reduce_local(op, v, static_cast<std::size_t>(n_));
  }

  /// Adds `values` across the job's processes, in place: one process, so nothing to add (the
  /// cross-process half of a metric's read; metrics/replica_slots.hpp).
  void sum_across_processes(std::span<double>) const { check_cross_replica("sum_across_processes()"); }

 protected:
  ThreadReplicas(int replicas, const char* strategy, const collective::Options& o)
      : n_(checked(replicas, strategy)), comms_(collective::InProcess::make_group(n_, o)),
        pool_(std::make_shared<ReplicaPool>(n_)) {}
  ~ThreadReplicas() = default;

  collective::InProcess& comm(int r) noexcept { return comms_[static_cast<std::size_t>(r)]; }
  /// Places replica r on devices[r] (one per replica): run() moves its rows there.
  void set_devices(std::vector<Device> devices) {
    STRATA_CHECK_EQ(devices.size(), static_cast<std::size_t>(n_), "set_devices: one device per replica");
    devices_ = std::move(devices);
  }
  /// Each replica's device; empty while the replicas compute on the host.
  const std::vector<Device>& devices() const noexcept { return devices_; }
  /// Runs fn(r) on every replica's own thread at once (what a replica must make there, like a
  /// communicator bound to its device); the first failure aborts the group and is rethrown.
  template <class F>
  void on_replica_threads(F&& fn) {
    auto error = [this](int r, const char* what) {
      comm(r).abort("replica " + std::to_string(r) + " failed: " + what);
    };
    pool_->run(fn, error);
  }
  /// Divides each batch's rows by the replicas' measured speed (RowSplit::measured) or evenly.
  void set_row_split(RowSplit how) {
    balance_.reset();
    if (how == RowSplit::measured && n_ > 1) {
      balance_.emplace(n_);
      bounds_.assign(static_cast<std::size_t>(n_) + 1, 0);
      rows_.assign(static_cast<std::size_t>(n_), 0);
      busy_.assign(static_cast<std::size_t>(n_), 0.0);
    }
  }

  int n_;

 private:
  static int checked(int replicas, const char* strategy) {
    STRATA_CHECK(replicas >= 1 && static_cast<std::size_t>(replicas) <= kMaxLocalReplicas, strategy,
                 ": replicas must be in 1..", kMaxLocalReplicas, ", got ", replicas);
    return replicas;
  }
  void check_size(std::size_t n, const char* what) const {
    STRATA_CHECK_EQ(n, static_cast<std::size_t>(n_), what, ": a PerReplica from another strategy");
  }

  template <class R, class Step>
  auto run_replicas(Step&& step) {
    check_cross_replica("run()");
    auto error = [this](int r, const char* what) {
      comm(r).abort("replica " + std::to_string(r) + " failed: " + what);
    };
    auto& self = static_cast<Derived&>(*this);
    if constexpr (std::is_void_v<R>) {
      auto job = [&](int r) { self.with_context(r, [&](ReplicaContext& ctx) { step(ctx, r); }); };
      pool_->run(job, error);
    } else {
      PerReplica<R> out(static_cast<std::size_t>(n_));
      auto job = [&](int r) {
        self.with_context(r, [&](ReplicaContext& ctx) { out[static_cast<std::size_t>(r)] = step(ctx, r); });
      };
      pool_->run(job, error);
      return out;
    }
  }

  data::Batch placed(int r, data::Batch rows) const {
    return devices_.empty() ? rows : rows.to(devices_[static_cast<std::size_t>(r)]);
  }
  /// The replicas' values, each on the host (a copy of those on a device).
  static PerReplica<Tensor> on_host(const PerReplica<Tensor>& v) {
    PerReplica<Tensor> out(v.size());
    for (std::size_t r = 0; r < v.size(); ++r)
      out[r] = v[r].defined() && v[r].device().kind != DeviceKind::cpu ? v[r].to(Device::cpu()) : v[r];
    return out;
  }

  void observe_rows() {
    for (std::size_t r = 0; r < rows_.size(); ++r) rows_[r] = bounds_[r + 1] - bounds_[r];
    balance_->observe(rows_, busy_);
  }

  std::vector<collective::InProcess> comms_;
  std::vector<Device> devices_;  // each replica's device; empty: the host
  std::shared_ptr<ReplicaPool> pool_;
  std::optional<RowBalance> balance_;
  std::vector<std::int64_t> bounds_, rows_;  // this step's row boundaries, and each replica's count
  std::vector<double> busy_;                 // each replica's busy seconds in this step
};

}  // namespace strata::detail

/// \file
/// MirroredStrategy: synchronous data parallelism over the local devices of one process (on
/// CPU: N replica threads). Every variable created under scope() is mirrored — a copy per
/// replica, identical at creation — and inside run() resolves to the current replica's copy;
/// each replica has its own tape. apply_gradients all-reduces the gradients (bucketed,
/// overlapped with backward by a GradientEngine per replica and model) and every replica
/// applies the same update to its copy, so the copies stay equal.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/collective/collective.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/collective_context.hpp>
#include <strata/strategy/gradient_engine.hpp>
#include <strata/strategy/local_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_pool.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/device.hpp>

namespace strata {

/// Options of MirroredStrategy.
struct MirroredOptions {
  std::size_t bucket_bytes = default_bucket_bytes();  ///< gradient bucket size (see GradientEngine)
  collective::Options collective = collective::Options::from_env();
};

/// One replica per local device; CPU replicas are threads sharing memory through
/// collective::InProcess (tf.distribute.MirroredStrategy).
///
/// @code
/// strata::MirroredStrategy strategy(2);          // two CPU replicas
/// auto model = strategy.scope([] { return make_mlp(); });   // a Replicated<Sequential>
/// @endcode
template <class C = collective::InProcess>
class MirroredStrategy {
  static_assert(std::is_same_v<C, collective::InProcess>,
                "MirroredStrategy<C>: CPU replicas are threads of one process and communicate through "
                "collective::InProcess; GPU replicas need a CUDA build with NCCL (-Dcuda=enabled -Dnccl=enabled). For "
                "one replica per process use MultiWorkerMirroredStrategy<C>");

 // After the assertion, the rest compiles as InProcess: one error message, not a cascade.
  using Comm = collective::InProcess;

 public:
  static constexpr const char* name = "mirrored";

  explicit MirroredStrategy(int replicas = 2, MirroredOptions o = {})
      : n_(checked(replicas)), options_(o), comms_(Comm::make_group(n_, o.collective)), pool_(n_),
        engines_(static_cast<std::size_t>(n_)) {}
  /// One replica per device (CPU devices: one thread each).
  explicit MirroredStrategy(const std::vector<Device>& devices, MirroredOptions o = {})
      : MirroredStrategy(cpu_replicas(devices), o) {}
  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;

  int num_replicas_in_sync() const noexcept { return n_; }
  bool is_chief() const noexcept { return true; }

  /// One copy of what `factory` makes per replica (see detail::make_replicas); a model's
  /// copies get a GradientEngine each.
  template <class F>
    requires std::invocable<F&>
  Replicated<std::invoke_result_t<F&>> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    auto copies = detail::make_replicas(factory, n_);
    using T = std::invoke_result_t<F&>;
    if constexpr (detail::HasParameters<T>) {
      for (int r = 0; r < n_; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        owned_.push_back(std::make_unique<GradientEngine<Comm>>(comms_[ur], copies[ur]->parameters(),
                                                             options_.bucket_bytes));
        engines_[ur].push_back(owned_.back().get());
      }
    }
    return Replicated<T>(std::move(copies));
  }

  /// The input pipeline, prefetching ahead; each batch is a global batch that run() splits.
  data::Pipeline distribute(const data::Pipeline& p) const {
    return p.options().prefetch > 0 ? p : p.prefetch(2);
  }

  /// Runs fn(ctx, rows) on every replica at once, each with its contiguous share of the
  /// global batch's rows; returns the replicas' results.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    return run_replicas<std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>>(
        [&](ReplicaContext& ctx, int r) { return fn(ctx, detail::replica_rows(batch, r, n_)); });
  }
  /// Runs fn(ctx) on every replica at once.
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_replicas<std::invoke_result_t<F&, ReplicaContext&>>([&](ReplicaContext& ctx, int) { return fn(ctx); });
  }

  /// Communication time of the gradient all-reduces so far (this process's replica 0).
  GradientStats gradient_stats() const {
    GradientStats total;
    for (const auto* e : engines_[0]) total += e->stats();
    return total;
  }

  /// The reduction across all replicas (Mean: over num_replicas_in_sync values).
  /// The replicas' values concatenated along axis 0, in replica order (tf's Strategy.gather).
  Tensor gather(const PerReplica<Tensor>& v) const {
    detail::check_cross_replica("gather()");
    STRATA_CHECK_EQ(v.size(), static_cast<std::size_t>(n_), "gather: a PerReplica from another strategy");
    return detail::concat_rows(v);
  }

  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& v) const {
    detail::check_cross_replica("reduce()");
    check_size(v.size());
    return detail::reduce_local(op, v, static_cast<std::size_t>(n_));
  }
  double reduce(ReduceOp op, const PerReplica<double>& v) const {
    detail::check_cross_replica("reduce()");
    check_size(v.size());
    return detail::reduce_local(op, v, static_cast<std::size_t>(n_));
  }

 private:
  static int cpu_replicas(const std::vector<Device>& devices) {
    for (const Device& d : devices)
      STRATA_CHECK(d.kind == DeviceKind::cpu, "MirroredStrategy on ", d, " needs a CUDA build (-Dcuda=enabled)");
    return static_cast<int>(devices.size());
  }
  static int checked(int replicas) {
    STRATA_CHECK(replicas >= 1 && static_cast<std::size_t>(replicas) <= kMaxLocalReplicas,
                 "MirroredStrategy: replicas must be in 1..", kMaxLocalReplicas, ", got ", replicas);
    return replicas;
  }
  void check_size(std::size_t n) const {
    STRATA_CHECK_EQ(n, static_cast<std::size_t>(n_), "reduce: a PerReplica from another strategy");
  }

  template <class R, class Step>
  auto run_replicas(Step&& step) {
    detail::check_cross_replica("run()");
    auto error = [this](int r, const char* what) {
      comms_[static_cast<std::size_t>(r)].abort("replica " + std::to_string(r) + " failed: " + what);
    };
    if constexpr (std::is_void_v<R>) {
      auto job = [&](int r) {
        detail::CollectiveReplicaContext<Comm> ctx(comms_[static_cast<std::size_t>(r)], r, n_,
                                                engines_[static_cast<std::size_t>(r)]);
        step(ctx, r);
      };
      pool_.run(job, error);
    } else {
      PerReplica<R> out(static_cast<std::size_t>(n_));
      auto job = [&](int r) {
        detail::CollectiveReplicaContext<Comm> ctx(comms_[static_cast<std::size_t>(r)], r, n_,
                                                engines_[static_cast<std::size_t>(r)]);
        out[static_cast<std::size_t>(r)] = step(ctx, r);
      };
      pool_.run(job, error);
      return out;
    }
  }

  int n_;
  MirroredOptions options_;
  std::vector<Comm> comms_;
  detail::ReplicaPool pool_;
  std::vector<std::unique_ptr<GradientEngine<Comm>>> owned_;
  std::vector<std::vector<GradientEngine<Comm>*>> engines_;  // per replica
};

template <class C>
inline constexpr bool enable_strategy<MirroredStrategy<C>> = true;

}  // namespace strata

/// \file
/// MultiWorkerMirroredStrategy<C>: synchronous data parallelism with one replica per process,
/// over a multi-process collective C (Mpi, Gloo), launched by mpirun or strata-run
/// (tf.distribute.MultiWorkerMirroredStrategy, Horovod, DDP). Variables are created on every
/// process and broadcast from rank 0, so all start equal; each process reads only its rows of
/// every global batch; gradients are all-reduced by a GradientEngine that overlaps the
/// all-reduce with backward, and every process applies the same update.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/collective/collective.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/collective_context.hpp>
#include <strata/strategy/distributed_pipeline.hpp>
#include <strata/strategy/gradient_engine.hpp>
#include <strata/strategy/local_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata {

/// Options of MultiWorkerMirroredStrategy besides the collective's own.
struct MultiWorkerOptions {
  std::size_t bucket_bytes = default_bucket_bytes();  ///< gradient bucket size (see GradientEngine)
};

/// One replica per process.
///
/// @code
/// strata::MultiWorkerMirroredStrategy<strata::collective::Mpi> strategy;   // under mpirun
/// strata::MultiWorkerMirroredStrategy<strata::collective::Gloo> strategy;  // under strata-run
/// @endcode
template <class C>
class MultiWorkerMirroredStrategy {
  static_assert(Collective<C>, "MultiWorkerMirroredStrategy<C>: C must be a collective policy (collective::Mpi, "
                               "collective::Gloo)");
  static_assert(!std::is_same_v<C, collective::InProcess>,
                "MultiWorkerMirroredStrategy<InProcess>: InProcess ranks are threads of one process; use "
                "MirroredStrategy for replicas on threads");

 public:
  static constexpr const char* name = "multi_worker_mirrored";

  /// Joins the job through C's constructor, called with `args` (e.g. a Gloo prefix).
  template <class... A>
  explicit MultiWorkerMirroredStrategy(MultiWorkerOptions o, A&&... args)
      : options_(o), comm_(std::forward<A>(args)...) {}
  MultiWorkerMirroredStrategy() : MultiWorkerMirroredStrategy(MultiWorkerOptions{}) {}
  MultiWorkerMirroredStrategy(const MultiWorkerMirroredStrategy&) = delete;
  MultiWorkerMirroredStrategy& operator=(const MultiWorkerMirroredStrategy&) = delete;

  int num_replicas_in_sync() const noexcept { return comm_.size(); }
  /// Rank 0 writes checkpoints and logs.
  bool is_chief() const noexcept { return comm_.rank() == 0; }
  int rank() const noexcept { return comm_.rank(); }
  C& collective() noexcept { return comm_; }

  /// What `factory` makes, with a model's parameters broadcast from rank 0 (every process
  /// starts from the chief's values) and a GradientEngine over them.
  template <class F>
    requires std::invocable<F&>
  std::invoke_result_t<F&> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    using T = std::invoke_result_t<F&>;
    T made = factory();
    if constexpr (detail::HasParameters<T>) {
      NoGradGuard no_grad;
      for (const Tensor& p : made.parameters()) {
        STRATA_CHECK(p.is_contiguous(), "scope(): parameters must be contiguous to be broadcast");
        comm_.broadcast_raw(p.raw_data(), static_cast<std::size_t>(p.numel()), p.dtype(), 0);
      }
      owned_.push_back(std::make_unique<GradientEngine<C>>(comm_, made.parameters(), options_.bucket_bytes));
      engines_.push_back(owned_.back().get());
    }
    return made;
  }

  /// This worker's input (see DistributedPipeline). By default every worker holds the same
  /// dataset and takes its rows of each global batch (`p.split(world, rank)`), assembled ahead
  /// on a background thread; Inputs::per_worker takes `p` as this worker's own, batched per
  /// replica, with `uneven` saying what happens when the workers run out at different steps.
  DistributedPipeline<C> distribute(const data::Pipeline& p, Inputs inputs = Inputs::split,
                                    UnevenInputs uneven = UnevenInputs::error) {
    data::Pipeline mine = inputs == Inputs::split ? p.split(comm_.size(), comm_.rank()) : p;
    if (mine.options().prefetch == 0) mine = mine.prefetch(2);
    return DistributedPipeline<C>(std::move(mine), comm_, inputs, uneven);
  }

  /// Runs fn(ctx, batch) as this process's replica.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    return run_replica<std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>>(
        [&](ReplicaContext& ctx) { return fn(ctx, batch); });
  }
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_replica<std::invoke_result_t<F&, ReplicaContext&>>([&](ReplicaContext& ctx) { return fn(ctx); });
  }

  /// Communication time of the gradient all-reduces so far (this process's replica 0).
  GradientStats gradient_stats() const {
    GradientStats total;
    for (const auto* e : engines_) total += e->stats();
    return total;
  }

  /// The reduction across every process's replica, the same on every process.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& v) {
    detail::check_cross_replica("reduce()");
    STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
    Tensor t = v[0].contiguous().clone();
    comm_.allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
    return t;
  }
  double reduce(ReduceOp op, const PerReplica<double>& v) {
    detail::check_cross_replica("reduce()");
    STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
    double x = v[0];
    comm_.allreduce_raw(&x, &x, 1, DType::f64, op);
    return x;
  }

 private:
  template <class R, class Step>
  auto run_replica(Step&& step) {
    detail::check_cross_replica("run()");
    detail::ReplicaScope scope(0, /*step=*/true);
    detail::CollectiveReplicaContext<C> ctx(comm_, comm_.rank(), comm_.size(), engines_);
    if constexpr (std::is_void_v<R>) {
      step(ctx);
    } else {
      PerReplica<R> out(1);
      out[0] = step(ctx);
      return out;
    }
  }

  MultiWorkerOptions options_;
  C comm_;
  std::vector<std::unique_ptr<GradientEngine<C>>> owned_;
  std::vector<GradientEngine<C>*> engines_;
};

template <class C>
inline constexpr bool enable_strategy<MultiWorkerMirroredStrategy<C>> = true;

}  // namespace strata

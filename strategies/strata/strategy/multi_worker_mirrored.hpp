/// \file
/// MultiWorkerMirroredStrategy<C>: synchronous data parallelism with one replica per process,
/// over a multi-process collective C (Mpi, Gloo), launched by mpirun or strata-run
/// (tf.distribute.MultiWorkerMirroredStrategy, Horovod, DDP). Variables are created on every
/// process and broadcast from rank 0, so all start equal; each process reads only its rows of
/// every global batch; gradients are all-reduced by a GradientEngine that overlaps the
/// all-reduce with backward, and every process applies the same update (ranks on one host
/// split it: each updates its share and writes it into the others' copies;
/// detail::split_across_processes).
#pragma once

#include <algorithm>
#include <exception>
#include <string>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/collective/flight_recorder.hpp>  // CallSite
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/reducer/update_across_processes.hpp>
#include <strata/strategy/detail/collective_context.hpp>
#include <strata/strategy/detail/make_replicas.hpp>
#include <strata/strategy/detail/process_replica.hpp>
#include <strata/strategy/detail/statistics_scope.hpp>
#include <strata/strategy/distributed_pipeline.hpp>
#include <strata/strategy/input_context.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/support/source_site.hpp>
#include <strata/tensor/placement.hpp>  // move_in_place

namespace strata {

/// Options of MultiWorkerMirroredStrategy besides the collective's own.
struct MultiWorkerOptions {
  std::size_t bucket_bytes = default_bucket_bytes();  ///< gradient bucket size (see GradientEngine)
  Compression compression = Compression::none;        ///< 16-bit gradients on the wire
  /// Ranks on one host may split the optimizer update: each updates its share of the
  /// parameters in its copy, kept in memory the ranks share, and writes it into the others'
  /// copies (detail::split_across_processes); the same values as every rank updating all of
  /// it. `measured` (the default) splits in the steps where that measurably costs less;
  /// STRATA_SPLIT_UPDATE=0 / 1 / auto sets the default.
  UpdateSplit split_update = default_split_update();
  SplitChoiceOptions split_choice = {};  ///< how `measured` probes
};

/// One replica per process.
///
/// @code
/// strata::MultiWorkerMirroredStrategy<strata::collective::Mpi> strategy;   // under mpirun
/// strata::MultiWorkerMirroredStrategy<strata::collective::Gloo> strategy;  // under strata-run
/// @endcode
template <class C>
class MultiWorkerMirroredStrategy : detail::RejectsReplicaValues,
                                    public detail::TakesArithmeticValues<MultiWorkerMirroredStrategy<C>> {
  static_assert(Collective<C>, "MultiWorkerMirroredStrategy<C>: C must be a collective policy (collective::Mpi, "
                               "collective::Gloo, collective::Nccl)");
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
      if constexpr (collective::DeviceCollective<C>) {  // a device collective (Nccl): the replica lives on its GPU
        move_in_place(made.parameters(), Device::cuda(comm_.device()));
        if constexpr (detail::HasBuffers<T>) move_in_place(made.buffers(), Device::cuda(comm_.device()));
      }
      detail::broadcast_parameters(comm_, made.parameters(), 0);
      detail::broadcast_generators(comm_, made, 0);
      owned_.push_back(std::make_unique<GradientEngine<C>>(comm_, made.parameters(), options_.bucket_bytes,
                                                           options_.compression));
      engines_.push_back(owned_.back().get());
      std::unique_ptr<detail::PartitionedUpdate> split;
      if constexpr (collective::HostSharedMemory<C>)
        if (options_.split_update != UpdateSplit::off)
          split = detail::split_across_processes(comm_, made.parameters(), *owned_.back(),
                                                 detail::measured_choice(options_.split_update, options_.split_choice));
      splits_.push_back(split.get());
      splits_owned_.push_back(std::move(split));
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

  /// This worker's input from a per-worker input function: `fn(context)` (one input pipeline
  /// per process) returns this worker's pipeline, sharded and batched by the user; the
  /// workers exchange their batch sizes each step, as distribute(p, Inputs::per_worker, uneven).
  template <InputFunction F>
  DistributedPipeline<C> distribute(F&& fn, UnevenInputs uneven = UnevenInputs::error) {
    return distribute(fn(InputContext{comm_.size(), comm_.rank(), comm_.size()}), Inputs::per_worker, uneven);
  }

  /// Runs fn(ctx, batch) as this process's replica.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    using R = std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>;
    if constexpr (collective::DeviceCollective<C>) {  // the input follows the variables to the GPU
      const data::Batch on_device = batch.to(Device::cuda(comm_.device()));
      return run_replica<R>([&](ReplicaContext& ctx) { return detail::run_on_rows(fn, ctx, on_device); });
    } else {
      return run_replica<R>([&](ReplicaContext& ctx) { return detail::run_on_rows(fn, ctx, batch); });
    }
  }
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_replica<std::invoke_result_t<F&, ReplicaContext&>>(
        [&](ReplicaContext& ctx) { return detail::run_with_statistics(fn, ctx); });
  }

  // Each cross-process call below notes its caller's file and line (`at`): the flight
  // recorder's label and the desync check's call site (collective::FlightRecorder::CallSite).

  /// Communication time of the gradient all-reduces so far (this process's replica 0).
  GradientStats gradient_stats() const {
    GradientStats total;
    for (const auto* e : engines_) total += e->stats();
    return total;
  }

  /// Every process's value concatenated along axis 0, in rank order, on every process (tf's
  /// Strategy.gather); axis 0 may differ between ranks, the other extents and dtype may not.
  Tensor gather(const PerReplica<Tensor>& v, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("gather()");
    const collective::FlightRecorder::CallSite site(at);
    return detail::allgather_value(comm_, v);
  }

  /// Rank 0's `bytes` on every process (a checkpoint the chief read, for every replica to restore).
  void share_from_chief(std::vector<unsigned char>& bytes, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("share_from_chief()");
    const collective::FlightRecorder::CallSite site(at);
    detail::broadcast_bytes(comm_, bytes, 0);
  }
  /// Rank 0's `n` bytes at `data` into every process's `data` (a large checkpoint tensor,
  /// straight from the chief's file into each replica's parameter).
  void broadcast_from_chief(void* data, std::size_t n, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("broadcast_from_chief()");
    const collective::FlightRecorder::CallSite site(at);
    comm_.broadcast_raw(data, n, DType::u8, 0);
  }
  /// After a save: the chief's error ("" when it wrote the checkpoint) goes to every rank, so
  /// that all of them fail a save the chief could not complete, or none does.
  void share_save_outcome(std::string& error, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("share_save_outcome()");
    const collective::FlightRecorder::CallSite site(at);
    std::vector<unsigned char> bytes(error.begin(), error.end());
    detail::broadcast_bytes(comm_, bytes, 0);
    error.assign(bytes.begin(), bytes.end());
  }

  /// The reduction across every process's replica, the same on every process.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& v, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("reduce()");
    const collective::FlightRecorder::CallSite site(at);
    return detail::allreduce_value(comm_, op, v);
  }
  using detail::RejectsReplicaValues::gather;  // a replica's own value: a compile-time error
  using detail::RejectsReplicaValues::reduce;
  using detail::TakesArithmeticValues<MultiWorkerMirroredStrategy<C>>::reduce;  // int64_t, float, ...
  using detail::TakesArithmeticValues<MultiWorkerMirroredStrategy<C>>::gather;
  double reduce(ReduceOp op, const PerReplica<double>& v, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("reduce()");
    const collective::FlightRecorder::CallSite site(at);
    return detail::allreduce_value(comm_, op, v);
  }
  /// Adds `values` element-wise across every process, in place (the cross-process half of a
  /// metric's read; metrics/replica_slots.hpp).
  void sum_across_processes(std::span<double> values, SourceSite at = SourceSite::current()) {
    detail::check_cross_replica("sum_across_processes()");
    const collective::FlightRecorder::CallSite site(at);
    if (!values.empty()) comm_.allreduce_raw(values.data(), values.data(), values.size(), DType::f64, ReduceOp::Sum);
  }

 protected:  // ShardedStrategy runs its own model state over the same process group
  template <class R, class Step>
  auto run_replica(Step&& step) {
    detail::check_cross_replica("run()");
    detail::ReplicaScope scope(0, /*step=*/true, /*in_sync=*/comm_.size());
    detail::CollectiveReplicaContext<C> ctx(comm_, comm_.rank(), comm_.size(), engines_, splits_);
    return run_in<R>(ctx, step);
  }
  /// `step` as this process's replica, in `ctx`.
  template <class R, class Step>
  auto run_in(ReplicaContext& ctx, Step& step) {
    // A step that fails on this rank alone would leave the others waiting at their next
    // collective until its deadline (under mpirun, this rank's exit waits in MPI_Finalize):
    // abort the group first, so they fail now and name this rank. A collective's own error
    // has reached them already.
    try {
      return detail::run_single_replica<R>(ctx, step);
    } catch (const collective_error&) {
      throw;
    } catch (const std::exception& e) {
      comm_.abort("rank " + std::to_string(comm_.rank()) + " failed in run(): " + e.what());
      throw;
    }
  }

  MultiWorkerOptions options_;
  C comm_;
  std::vector<std::unique_ptr<GradientEngine<C>>> owned_;
  std::vector<GradientEngine<C>*> engines_;
  std::vector<std::unique_ptr<detail::PartitionedUpdate>> splits_owned_;
  std::vector<detail::PartitionedUpdate*> splits_;  // beside engines_ (null: not split)
};

template <class C>
inline constexpr bool enable_strategy<MultiWorkerMirroredStrategy<C>> = true;

}  // namespace strata

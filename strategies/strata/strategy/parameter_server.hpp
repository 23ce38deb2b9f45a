/// \file
/// ParameterServerStrategy<C, Mode>: variables sharded over server ranks, workers computing
/// (MXNet KVStore dist_sync/dist_async, TF ParameterServerStrategy). C picks the transport
/// (collective::Mpi: MPI point-to-point), Mode is ps::Sync or ps::Async. Every rank runs the
/// same training loop: on a server, iterating distribute()'s range serves the workers until
/// they finish the epoch, so the loop body runs on workers only; after every epoch all ranks
/// hold the servers' values. See docs/parameter_server.md.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/checkpoint/crc32c.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/config.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/strategy/checkpointing.hpp>     // checkpoints_supported
#include <strata/strategy/detail/make_replicas.hpp>
#include <strata/strategy/detail/statistics_scope.hpp>
#include <strata/strategy/distributed_pipeline.hpp>
#include <strata/strategy/input_context.hpp>
#include <strata/strategy/parameter_server/checkpoint_index.hpp>
#include <strata/strategy/parameter_server/epoch_range.hpp>
#include <strata/strategy/parameter_server/roles.hpp>
#include <strata/strategy/parameter_server/server.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/strategy/parameter_server/transport.hpp>
#include <strata/strategy/parameter_server/worker.hpp>
#include <strata/strategy/parameter_server/worker_context.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/detail/process_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata {

namespace ps {
/// Each step aggregates every worker's gradients before one update (MXNet dist_sync).
struct Sync {};
/// Each push is applied on arrival (MXNet dist_async, TF's default), optionally with a
/// staleness bound.
struct Async {};
template <class M>
concept Mode = std::same_as<M, Sync> || std::same_as<M, Async>;
}  // namespace ps

struct ParameterServerOptions {
  int servers = 0;                       ///< server ranks (0: STRATA_NUM_SERVERS, else 1); see ps::Roles
  bool update_on_servers = true;         ///< the optimizer runs on the servers (MXNet update_on_kvstore)
  std::int64_t staleness = -1;           ///< Async: pushes a worker may run ahead of the slowest (-1: no bound)
  std::int64_t partition_bytes = 256 << 10;  ///< variables this large are split over every server
  /// Row-sparse tables go by rows: workers push the rows they touched and get back the rows
  /// that changed (docs/design/sparse_tables.md). false: they are pushed and pulled whole like any
  /// variable (the dense protocol; the lazy rule then needs update_on_servers = false).
  bool sparse_tables = true;
  /// Async: each worker takes the epoch's next batch from the first server (ps::Dispatcher,
  /// as TF's ClusterCoordinator dispatches closures), so a lost worker's batches go to the
  /// others and a slower worker takes fewer. false: each worker takes every W-th example.
  bool dispatch_batches = false;
  /// Row-sparse tables live on the servers only: inside an epoch a worker's copy gives its
  /// memory back, and embedding() asks the servers for the rows it reads (TF's lookups of
  /// parameter-server embeddings); at the epoch's end the values arrive whole, as for every
  /// variable. Inside an epoch, read such a table through embedding() only: its memory reads
  /// zeros there (docs/design/sparse_tables.md). Needs sparse_tables and update_on_servers.
  bool remote_tables = false;
  /// Async over Gloo, with dispatch_batches: workers may join the running job. Each server
  /// admits a process started with STRATA_PS_JOIN=1 and the job's STRATA_MASTER_ADDR/PORT
  /// and STRATA_JOB_TOKEN (the job meets through its TCP store: strata-run --rendezvous tcp);
  /// the joiner takes the values and the epoch from the servers (first_epoch()) and batches
  /// from the same queue as the others (docs/parameter_server.md, "Workers that join").
  bool admit_workers = false;
  /// Async: when losses leave fewer live workers than this, the servers end the job, naming
  /// the workers left.
  int min_workers = 1;
  /// admit_workers: a joiner that would make more live workers than this is refused, by
  /// name on both sides (0: no bound).
  int max_workers = 0;
};

/// The strategy for a C without a transport, or a Mode that is not one: a compile-time error.
template <class C, class Mode = ps::Sync>
class ParameterServerStrategy {
  static_assert(ps::TransportOf<C>, "ParameterServerStrategy<C, Mode>: C picks the transport between servers and "
                                      "workers: collective::Mpi or collective::Gloo (in a build with -Dmpi=enabled or -Dgloo=enabled)");
  static_assert(ps::Mode<Mode>, "ParameterServerStrategy<C, Mode>: Mode is ps::Sync or ps::Async");
};

template <class C, class Mode>
  requires ps::TransportOf<C> && ps::Mode<Mode>
class ParameterServerStrategy<C, Mode> : detail::RejectsReplicaValues,
                                        public detail::TakesArithmeticValues<ParameterServerStrategy<C, Mode>> {
  static constexpr bool sync = std::is_same_v<Mode, ps::Sync>;
  using T = ps::Transport<C>;

 public:
  static constexpr const char* name = "parameter_server";

  explicit ParameterServerStrategy(ParameterServerOptions o = {})
      : o_(o), t_(o.servers), shards_(static_cast<int>(t_.roles().servers.size())) {
    STRATA_CHECK(sync || o.update_on_servers, "ParameterServerStrategy<Async>: update_on_servers = false needs Sync "
                 "(an asynchronous push is applied where it arrives)");
    STRATA_CHECK(o.staleness >= -1, "ParameterServerStrategy: staleness must be -1 (no bound) or >= 0, got ", o.staleness);
    STRATA_CHECK(!o.dispatch_batches || (!sync && o.staleness < 0), "ParameterServerStrategy: dispatch_batches needs "
                 "Async without a staleness bound (a bounded worker could wait for one that waits for its next batch)");
    STRATA_CHECK(!o.remote_tables || (o.sparse_tables && o.update_on_servers), "ParameterServerStrategy: "
                 "remote_tables needs sparse_tables and update_on_servers (a worker without the table's values "
                 "cannot update it)");
    STRATA_CHECK(!o.admit_workers || (!sync && o.dispatch_batches), "ParameterServerStrategy: admit_workers needs "
                 "Async with dispatch_batches (a worker that joins takes its batches from the same queue as the others)");
    STRATA_CHECK(o.min_workers >= 1 && (o.max_workers == 0 || o.max_workers >= o.min_workers),
                 "ParameterServerStrategy: min_workers (", o.min_workers, ") must be at least 1, and max_workers (",
                 o.max_workers, ") 0 or at least min_workers");
    STRATA_CHECK(joined() || (o.min_workers <= num_workers() && (o.max_workers == 0 || num_workers() <= o.max_workers)),
                 "ParameterServerStrategy: the job starts with ", num_workers(), " workers, outside min_workers=",
                 o.min_workers, " and max_workers=", o.max_workers);
    STRATA_CHECK(o.admit_workers || !joined(), "ParameterServerStrategy: this process joins a running job "
                 "(STRATA_PS_JOIN=1), but admit_workers is off: the job's servers admit no workers");
    if (o.admit_workers) {
      if constexpr (ps::AdmitsWorkers<T>) {
        if (t_.is_server()) t_.admit_joiners();
      } else {
        STRATA_CHECK(false, "ParameterServerStrategy: admit_workers needs the Gloo transport (an MPI job's ranks are fixed)");
      }
    }
    if (t_.is_server())
      server_.emplace(t_, shards_, typename ps::Server<T>::Settings{sync, o.update_on_servers, o.staleness, o.sparse_tables,
                                                                    o.remote_tables, o.min_workers, o.max_workers});
    else
      worker_.emplace(t_, shards_, o.update_on_servers, o.sparse_tables);
  }
  ParameterServerStrategy(const ParameterServerStrategy&) = delete;
  ParameterServerStrategy& operator=(const ParameterServerStrategy&) = delete;

  /// Workers in sync (Sync), or 1: an Async step is one worker's own update.
  int num_replicas_in_sync() const noexcept { return sync ? num_workers() : 1; }
  /// The first worker logs and writes checkpoints.
  bool is_chief() const noexcept { return !joined() && t_.rank() == t_.roles().workers.front(); }
  /// A worker that joined the running job (admit_workers).
  bool joined() const noexcept {
    if constexpr (ps::AdmitsWorkers<T>)
      return t_.joined();
    else
      return false;
  }
  /// The epoch this worker's loop starts at: 0, or, for a worker that joined the running job,
  /// the job's current epoch. A joiner's first call also takes the servers' current values.
  /// A loop that may run on a joiner starts here:
  ///   for (auto e = strategy.first_epoch(); e < epochs; ++e) for (auto& b : strategy.distribute(p)) ...
  std::int64_t first_epoch() {
    if (!joined()) return 0;
    if (first_epoch_ < 0) {
      NoGradGuard no_grad;
      first_epoch_ = worker_->catch_up();
    }
    return first_epoch_;
  }
  bool is_server() const { return t_.is_server(); }
  int num_workers() const noexcept { return static_cast<int>(t_.roles().workers.size()); }
  int num_servers() const noexcept { return static_cast<int>(t_.roles().servers.size()); }
  int rank() const noexcept { return t_.rank(); }
  const ps::Shards& shards() const noexcept { return shards_; }
  T& transport() noexcept { return t_; }

  /// What `factory` makes. A model's parameters take the first worker's values on every rank
  /// and are placed on the servers; an optimizer runs on the servers (update_on_servers).
  template <class F>
    requires std::invocable<F&>
  std::invoke_result_t<F&> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    using M = std::invoke_result_t<F&>;
    M made = factory();
    if constexpr (detail::HasParameters<M>) {
      detail::broadcast_parameters(t_.world(), made.parameters(), chief_rank());
      detail::broadcast_generators(t_.world(), made, chief_rank());
      const auto ids = shards_.add(made.parameters(), o_.partition_bytes);
      if (server_) server_->hold(ids);
    }
    if constexpr (std::derived_from<M, optim::Optimizer>)
      if (server_ && o_.update_on_servers) server_->attach(made);
    return made;
  }

  using EpochRange = ps::EpochRange<ParameterServerStrategy, T>;
  friend EpochRange;
  friend class ps::WorkerContext<ParameterServerStrategy>;
  /// This rank's input. Sync: a worker takes its rows of every global batch (as under
  /// MultiWorkerMirroredStrategy). Async: a worker takes every W-th example of the epoch, in
  /// batches of the pipeline's size, or (dispatch_batches) the epoch's next batch from the
  /// first server, step by step. On a server, iterating serves the epoch (see the file).
  EpochRange distribute(const data::Pipeline& p) {
    if (o_.dispatch_batches) return EpochRange(*this, p, /*dispatched=*/true);
    const int w = t_.is_server() ? 0 : t_.roles().index_of(t_.rank());
    data::Pipeline mine = sync ? p.split(num_workers(), w) : p.shard(num_workers(), w);
    if (!t_.is_server() && mine.options().prefetch == 0) mine = mine.prefetch(2);
    return EpochRange(*this, std::move(mine));
  }
  /// This rank's input from a per-worker input function: `fn(context)` (one input pipeline
  /// per worker; a server is told it is pipeline 0 and its pipeline is not read) returns this
  /// worker's pipeline, sharded and batched by the user. Sync: the workers exchange their batch
  /// sizes each step, so Batch::global_size is the step's total, and `uneven` says what
  /// happens when they run out at different steps (as MultiWorkerMirroredStrategy's).
  template <InputFunction F>
  EpochRange distribute(F&& fn, UnevenInputs uneven = UnevenInputs::error) {
    const int w = t_.is_server() ? 0 : t_.roles().index_of(t_.rank());
    STRATA_CHECK(!o_.dispatch_batches, "ParameterServerStrategy: dispatch_batches hands out the batches of one "
                 "pipeline (distribute(pipeline)); a per-worker input function shards its own");
    data::Pipeline mine = fn(InputContext{num_workers(), w, num_replicas_in_sync()});
    if (!t_.is_server() && mine.options().prefetch == 0) mine = mine.prefetch(2);
    EpochRange range(*this, std::move(mine));
    if constexpr (sync) range.exchange_sizes(uneven);
    return range;
  }

  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    return run_replica<std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>>(
        [&](ReplicaContext& ctx) { return detail::run_on_rows(fn, ctx, batch); });
  }
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_replica<std::invoke_result_t<F&, ReplicaContext&>>(
        [&](ReplicaContext& ctx) { return detail::run_with_statistics(fn, ctx); });
  }

  /// The bytes this worker pushed to and pulled from the servers in its steps (zero on a server).
  ps::TransferStats transfer_stats() const { return worker_ ? worker_->stats() : ps::TransferStats{}; }

  /// Sync: the reduction over the workers, the same on each. Async: this worker's value.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& v) {
    detail::check_cross_replica("reduce()");
    if constexpr (sync) {
      return detail::allreduce_value(t_.group(), op, v);
    } else {
      STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
      return v[0].contiguous().clone();
    }
  }
  double reduce(ReduceOp op, const PerReplica<double>& v) {
    detail::check_cross_replica("reduce()");
    if constexpr (sync) {
      return detail::allreduce_value(t_.group(), op, v);
    } else {
      STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
      return v[0];
    }
  }
  using detail::RejectsReplicaValues::reduce;  // a replica's own value: a compile-time error
  using detail::TakesArithmeticValues<ParameterServerStrategy<C, Mode>>::reduce;  // int64_t, float, ...
  using detail::TakesArithmeticValues<ParameterServerStrategy<C, Mode>>::gather;

  /// Sync: every worker's tensor concatenated along axis 0, in worker order, on each worker.
  /// Async: this worker's value.
  Tensor gather(const PerReplica<Tensor>& v) {
    detail::check_cross_replica("gather()");
    if constexpr (sync) {
      return detail::allgather_value(t_.group(), v);
    } else {
      STRATA_CHECK_EQ(v.size(), std::size_t{1}, "gather: a PerReplica from another strategy");
      return v[0].contiguous().clone();
    }
  }
  using detail::RejectsReplicaValues::gather;

  /// Adds `values` element-wise across every rank, servers included (they add what they hold,
  /// nothing for a metric), in place: every rank then reads the workers' figures. The job's
  /// first ranks only: a worker that joined adds its own alone (job_examples_per_s goes
  /// through the first server instead).
  void sum_across_processes(std::span<double> values) {
    detail::check_cross_replica("sum_across_processes()");
    if (!values.empty())
      t_.world().allreduce_raw(values.data(), values.data(), values.size(), DType::f64, ReduceOp::Sum);
  }

  /// The job's training rate from this rank's: under Sync every worker counts the global
  /// batch (unchanged); under Async each worker counts its own examples, so the job's rate
  /// is the workers' sum (a collective of every rank: servers add 0).
  double job_examples_per_s(double mine) {
    if constexpr (sync) {
      return mine;
    } else {  // through the first server, so a worker lost under Async is simply left out
      if (worker_) return worker_->sum_over_workers(mine);
      return t_.rank() == t_.roles().servers.front() ? server_->sum_over_workers() : 0.0;
    }
  }

  // ---- checkpoints (Sync; TrainingCheckpoints calls these) --------------------------------
  // The chief writes an index checkpoint (the model as the workers hold it, the position, the
  // generator) that records each server's shard by its CRC-32C; each server writes its shard,
  // the values and optimizer state of its partitions, on the chief's request.

  /// Where this job's checkpoints go (every rank: the servers write their shards there).
  void set_checkpoint_dir(const std::filesystem::path& dir) {
    if (server_) server_->set_checkpoint_dir(dir);
  }
  /// The chief's index checkpoint, with every rank: the index's bytes go to every rank.
  void share_from_chief(std::vector<unsigned char>& bytes) { detail::broadcast_bytes(t_.world(), bytes, chief_rank()); }
  /// The chief's `n` bytes at `data` into every rank's `data` (a large checkpoint tensor).
  void broadcast_from_chief(void* data, std::size_t n) { t_.world().broadcast_raw(data, n, DType::u8, chief_rank()); }
  /// Every server's shard at `step`; returns what the chief's index records. Inside an epoch
  /// (a worker between steps) the chief asks the serving servers; after one (every rank calls
  /// save), the servers write theirs and the CRCs meet over the job's collective.
  checkpoint::NamedTensors checkpoint_shards(std::int64_t step) {
    std::vector<std::int64_t> crcs;
    if (in_epoch_) {
      if (!is_chief()) return {};
      crcs = worker_->save_shards(step);
    } else {
      // Every rank saves here, but only a worker's loop knows the step: the chief's counts
      // (a server's own position never moved).
      t_.world().broadcast_raw(&step, 1, DType::i64, chief_rank());
      const std::int64_t mine = server_ ? server_->save_shard(step) : 0;
      std::vector<std::int64_t> all(static_cast<std::size_t>(t_.world().size()));
      t_.world().allgather(std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(all));
      for (int s : t_.roles().servers) crcs.push_back(all[static_cast<std::size_t>(s)]);
    }
    return {{"ps.shard_crc", from_vector<std::int64_t>({static_cast<std::int64_t>(crcs.size())}, crcs)}};
  }
  /// The chief, choosing an index to resume from: throws unless every shard it records is
  /// present, whole and the one recorded (the directory is shared by the chief and the
  /// servers, as TF's parameter-server checkpoints require), so a damaged newest checkpoint
  /// is skipped for the one before.
  /// (An index that does not fit this job is not skipped: restore_shards refuses it by name.)
  void check_shards(const checkpoint::Reader& r, const std::filesystem::path& dir, std::int64_t step) const {
    const checkpoint::Entry* e = r.find("ps.shard_crc");
    if (e == nullptr || r.read("ps.shard_crc").numel() != num_servers()) return;
    for (int k = 0; k < num_servers(); ++k) open_shard(r, dir, step, k).verify();
  }
  /// Every rank, after the index `r` of step `step` is restored: each server takes its shard.
  void restore_shards(const checkpoint::Reader& r, const std::filesystem::path& dir, std::int64_t step) {
    (void)shard_crcs(r);
    if (!server_) return;
    // The chief's index wrote every row of the tables here: the other servers' rows go back
    // to the system before this one's shard is read, so a resume peaks at the shard's size.
    server_->release_other_rows();
    server_->restore_shard(open_shard(r, dir, step, t_.roles().index_of(t_.rank())));
  }
  /// The shard CRCs index `r` records, one per server of this job.
  Tensor shard_crcs(const checkpoint::Reader& r) const { return ps::shard_crcs(r, num_servers()); }
  /// Server `k`'s shard of index `r`, opened and checked against the CRC-32C the index recorded.
  checkpoint::Reader open_shard(const checkpoint::Reader& r, const std::filesystem::path& dir, std::int64_t step,
                                int k) const {
    return ps::open_shard(r, dir, step, k, num_servers());
  }

  /// The chief, after the index of a save is committed: removes the shards of the steps whose
  /// index is gone (`kept`: the steps still indexed).
  void prune_shards(const std::filesystem::path& dir, const std::vector<std::int64_t>& kept) {
    ps::prune_shards(dir, kept);
  }

  /// What the first server's dispatcher did in the last epoch with dispatched batches (zero
  /// elsewhere): the epoch's batches, those completed, completed again, and handed out again.
  typename ps::Server<T>::DispatchStats dispatch_stats() const {
    return server_ ? server_->dispatch_stats() : typename ps::Server<T>::DispatchStats{};
  }

  /// Updates applied so far to partition `id`, on the server holding it (0 elsewhere).
  std::int64_t server_updates(std::size_t id) const { return server_ ? server_->updates(id) : 0; }

 private:
  int chief_rank() const { return t_.roles().workers.front(); }

  template <class R, class Step>
  auto run_replica(Step&& step) {
    detail::check_cross_replica("run()");
    STRATA_CHECK(worker_.has_value(), "run() on server rank ", t_.rank(), ": servers serve inside the loop over "
                 "distribute(), whose body runs on the workers only");
    detail::ReplicaScope scope(0, /*step=*/true, /*in_sync=*/num_replicas_in_sync());
    ps::WorkerContext<ParameterServerStrategy> ctx(*this);
    return detail::run_single_replica<R>(ctx, step);
  }

  void finish_epoch() {
    in_epoch_ = false;
    if (o_.remote_tables) worker_->detach_remote_tables();
    worker_->finish_epoch();
    publish_values();
  }

  /// Every rank takes the authoritative values: the servers' (update on servers: each server
  /// sends its partitions to the workers still in the job, and the servers sum their zero-
  /// padded shares among themselves), else the workers' (all equal; Sync only).
  void publish_values() {
    NoGradGuard no_grad;
    if (o_.update_on_servers) {
      if (worker_) {
        worker_->receive_values();
        return;
      }
      server_->send_values();
      server_->values_into_variables();
      // A table going by rows stays in blocks: each server's copy keeps its own rows.
      for (std::size_t i = 0; i < shards_.variables.size(); ++i) {
        const Tensor& v = shards_.variables[i];
        if (!server_->keeps_own_rows(i))
          t_.group().allreduce_raw(v.raw_data(), v.raw_data(), static_cast<std::size_t>(v.numel()), v.dtype(), ReduceOp::Sum);
      }
    } else {  // the workers hold the same values already; a server's copy of a table going by rows is never read
      for (std::size_t i = 0; i < shards_.variables.size(); ++i) {
        const Tensor& v = shards_.variables[i];
        if (!(o_.sparse_tables && shards_.partitions[shards_.of_variable[i].front()].row_width > 0))
          t_.world().broadcast_raw(v.raw_data(), static_cast<std::size_t>(v.numel()), v.dtype(), chief_rank());
      }
    }
  }

  ParameterServerOptions o_;
  T t_;
  ps::Shards shards_;
  std::optional<ps::Server<T>> server_;
  std::optional<ps::Worker<T>> worker_;
  bool in_epoch_ = false;  ///< a worker between an epoch's begin() and its end (the servers are serving)
  std::int64_t first_epoch_ = -1;  ///< a joiner's, once it caught up
};

template <class C, class M>
  requires ps::TransportOf<C> && ps::Mode<M>
inline constexpr bool enable_strategy<ParameterServerStrategy<C, M>> = true;

// Async has no step at which every server's state is one consistent point to save.
template <class C>
inline constexpr bool checkpoints_supported<ParameterServerStrategy<C, ps::Async>> = false;

}  // namespace strata

#if STRATA_HAS_MPI
#include <strata/strategy/parameter_server/mpi_transport.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/strategy/parameter_server/gloo_transport.hpp>
#endif

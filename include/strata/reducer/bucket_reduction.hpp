/// \file
/// BucketReduction: how a GradientEngine's bucket all-reduce runs, one object chosen when the
/// engine is made.
///
///   ReplicaThreadReduction  the replica's own thread reduces the bucket at once, with its
///                           peers: InProcess replicas (threads of one process), and Mpi/Gloo
///                           ranks whose buckets sit in shared memory on a host with no core to
///                           spare (shared_buckets_reduce_on_replica_thread).
///   CommThreadReduction     the engine's communication thread runs the collective's blocking
///                           all-reduce, bucket after bucket, while backward computes
///                           (Horovod's background thread); the one path with wire compression.
///   ShardedReduction        InProcess replicas under GradientLayout::sharded: in a step whose
///                           update splits, each replica leaves the sum in its own share and
///                           gathers the rest from its peers when the gradients are read.
///   ScatterReduction        processes under ShardedStrategy (gradients sharded): the engine's
///                           communication thread reduce-scatters each bucket, so that rank r
///                           holds the sum of block r alone; gathered whole only when read.
///
/// docs/gradient_engine.md has the measurements behind each choice.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <thread>  // hardware_concurrency
#include <utility>  // declval
#include <vector>

#include <strata/collective/async.hpp>  // Work, AsyncWorker, complete
#include <strata/collective/capabilities.hpp>
#include <strata/collective/flight_recorder.hpp>  // FlightRecorder::Label
#include <strata/observe/timeline.hpp>
#include <strata/reducer/gradient_buckets.hpp>
#include <strata/reducer/partitioned_update.hpp>
#include <strata/reducer/sharded_gradients.hpp>
#include <strata/reducer/wire_compression.hpp>
#include <strata/runtime/process.hpp>  // env, env_int

namespace strata::detail {

/// Whether a multi-process engine whose buckets all sit in memory the `ranks` share (all on
/// this host) runs their all-reduces on the replica's own thread instead of its communication
/// thread: where the host has no core beyond one per rank. The reduction is then
/// memory-bound work on the cores the ranks compute on, and a second thread per rank can only
/// take turns with them (MultiWorkerMirrored<Mpi>, MLP, 2 ranks on 2 cores: 5 % more
/// examples/s on the replica's thread; docs/gradient_engine.md). STRATA_COMM_THREAD=1 keeps
/// the communication thread, =0 never uses it where the buckets are shared.
inline bool shared_buckets_reduce_on_replica_thread(int ranks) {
  if (const char* v = runtime::detail::env("STRATA_COMM_THREAD"))
    return runtime::detail::env_int("STRATA_COMM_THREAD", v, 0, 1) == 0;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores != 0 && cores <= static_cast<unsigned>(ranks);
}

/// A bucket's all-reduce (or `what`) as a timeline event, its duration left in `bk.seconds`.
template <class F>
void timed_reduction(GradientBucket& bk, std::size_t b, F&& reduce, const char* what = "allreduce") {
  const auto t0 = std::chrono::steady_clock::now();
  observe::ScopedEvent ev(what, "communication", static_cast<std::int64_t>(b), static_cast<std::int64_t>(bk.bytes()));
  const collective::FlightRecorder::Label label("bucket", static_cast<std::int64_t>(b));
  reduce();
  bk.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// GradientLayout::sharded as an engine is made with it: the group of every replica's buffers,
/// this replica's index in it, and the split update whose way decides each step. Or, for
/// ShardedStrategy's processes, the buckets in `blocks` equal blocks (one per rank), with
/// `scatter` reduce-scattered into them.
struct GradientSharding {
  std::shared_ptr<ShardedGradients> group;  ///< null: gradients whole
  int replica = 0;
  const PartitionedUpdate* split = nullptr;
  bool in_blocks = false;  ///< ShardedStrategy's layout: the buckets in `blocks` blocks (one, for one process)
  int blocks = 1;
  bool scatter = false;
  /// With `scatter`: each bucket reduce-scattered through the collective's own asynchronous
  /// ireduce_scatter, in the one call order of the collectives it has in flight (the wrap
  /// units' all-gathers: ShardedStrategy's stage 3 where they overlap compute).
  bool async = false;
  /// With `scatter`: each bucket (of no wrap unit) gives its memory back once its
  /// reduce-scatter has completed and takes it again at its next gradient, so whole gradients
  /// are held only while their bucket fills and reduces (ShardedStrategy's stages 2 and 3).
  bool release = false;
  /// Each parameter's wrap unit (BucketPlan), -1 for none: a unit's bucket holds memory only
  /// from its backward to its reduce-scatter (ShardedStrategy's stage 3).
  std::vector<int> units;
};

template <class C>
class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  /// Starts bucket b's all-reduce, its gradients final (buckets start in index order every
  /// step). On the replica's thread the sum is there on return; otherwise `bk.done` completes.
  /// Returns whether the sum is left in this replica's share of the bucket only.
  virtual bool start(GradientBucket& bk, std::size_t b) = 0;
  /// Whether start() runs the reduction on the calling (replica) thread.
  virtual bool on_replica_thread() const noexcept { return true; }
  /// After a step whose sums were left in shares, waits for the peers' shares and copies
  /// them in: every gradient whole.
  virtual void gather(GradientBuckets&) {}
  /// Every bucket of the step has started and `done`: what reads the sums next may go on.
  virtual void settled() {}
  /// Waits for bucket b's reduction, started this step.
  virtual void wait(GradientBucket& bk, std::size_t) { bk.done.wait(); }
  /// Whether bucket b's reduction, started this step, has completed (without waiting).
  virtual bool test(GradientBucket& bk, std::size_t) { return bk.done.test(); }
};

template <class C>
class ReplicaThreadReduction final : public BucketReduction<C> {
 public:
  explicit ReplicaThreadReduction(C& comm) : comm_(comm) {}
  bool start(GradientBucket& bk, std::size_t b) override {
    timed_reduction(bk, b, [&] {
      void* p = bk.buffer.raw_data();
      comm_.allreduce_raw(p, p, bk.count, bk.dtype, ReduceOp::Sum);
    });
    return false;
  }

 private:
  C& comm_;
};

/// Buckets on a device (a DeviceCollective): each all-reduce is queued on the device behind
/// the backward kernels that filled its bucket, from the replica's thread, which goes on at
/// once; settled() makes the compute stream wait for them, so the optimizer's kernels read the
/// sums and no host thread waits for the device in the step (the collective's watchdog holds
/// the queued work to the deadline). The seconds counted are the queueing's.
template <class C>
  requires collective::DeviceCollective<C>
class DeviceStreamReduction final : public BucketReduction<C> {
 public:
  explicit DeviceStreamReduction(C& comm) : comm_(comm) {}
  bool start(GradientBucket& bk, std::size_t b) override {
    timed_reduction(bk, b, [&] { comm_.start_allreduce_raw(bk.buffer.raw_data(), bk.count, bk.dtype, ReduceOp::Sum); });
    return false;
  }
  void settled() override { comm_.join_compute(); }

 private:
  C& comm_;
};

/// The engine's communication thread, which runs `run(b)` (bucket b's collective) for each
/// bucket started, and one Work state per bucket, re-armed each step: the job handed to the
/// thread is small enough for std::function to hold inline, so starting a bucket allocates
/// nothing.
class BucketThread {
 public:
  BucketThread(std::size_t buckets, std::function<void(std::size_t)> run) : run_(std::move(run)), states_(buckets) {}
  /// Queues bucket b's collective on the thread; `bk.done` completes with it.
  void start(GradientBucket& bk, std::size_t b) {
    auto& st = states_[b];
    if (!st) st = std::make_shared<collective::Work::State>();
    st->reset();
    bk.done = collective::Work(st);
    worker_.enqueue([this, b] {
      thread_local const bool named = (observe::Timeline::instance().name_thread("communication"), true);
      (void)named;
      collective::detail::complete(*states_[b], [&] { run_(b); });
    });
  }

 private:
  std::function<void(std::size_t)> run_;
  std::vector<std::shared_ptr<collective::Work::State>> states_;  // `done`'s state per bucket
  collective::detail::AsyncWorker worker_;
};

template <class C>
  requires(!collective::ThreadGroupCollective<C>)
class CommThreadReduction final : public BucketReduction<C> {
 public:
  CommThreadReduction(C& comm, GradientBuckets& buckets, WireCompressor<C> compressor)
      : comm_(comm), buckets_(buckets), compressor_(std::move(compressor)),
        thread_(buckets.size(), [this](std::size_t b) { run(buckets_[b], b); }) {}
  bool on_replica_thread() const noexcept override { return false; }
  bool start(GradientBucket& bk, std::size_t b) override {
    thread_.start(bk, b);
    return false;
  }

 private:
  void run(GradientBucket& bk, std::size_t b) {
    timed_reduction(bk, b, [&] {
      void* p = bk.buffer.raw_data();
      if (!compressor_.allreduce(comm_, b, p, bk.count)) comm_.allreduce_raw(p, p, bk.count, bk.dtype, ReduceOp::Sum);
    });
  }

  C& comm_;
  GradientBuckets& buckets_;
  WireCompressor<C> compressor_;
  BucketThread thread_;  // last: its thread stops before the members its jobs use go
};

/// ShardedStrategy's reduction: each bucket reduce-scattered into `sums[b]`, this rank's block
/// of its sum (the buckets padded to equal blocks), on the communication thread, or on the
/// replica's own where the host has no core beyond one per rank (`on_replica`: the reduction
/// would only take turns with backward there; shared_buckets_reduce_on_replica_thread's
/// rule); gather() all-gathers the blocks back into the buckets, on the calling thread, for a
/// reader of whole gradients.
template <class C>
  requires(!collective::ThreadGroupCollective<C>)
class ScatterReduction final : public BucketReduction<C> {
 public:
  /// Where each bucket's reduce-scatter runs.
  enum class Where { replica_thread, comm_thread, collective_async };
  ScatterReduction(C& comm, GradientBuckets& buckets, const std::vector<Tensor>& sums, Where where)
      : comm_(comm), buckets_(buckets), sums_(sums), where_(where),
        thread_(buckets.size(), [this](std::size_t b) { run(buckets_[b], b); }) {}
  bool on_replica_thread() const noexcept override { return where_ == Where::replica_thread; }
  bool start(GradientBucket& bk, std::size_t b) override {
    if (where_ == Where::replica_thread)
      run(bk, b);
    else if (where_ == Where::comm_thread)
      thread_.start(bk, b);
    else
      async_[b] = start_async(bk, b);
    return true;
  }
  void wait(GradientBucket& bk, std::size_t b) override {
    if (where_ == Where::collective_async)
      async_[b].wait();
    else
      bk.done.wait();
  }
  bool test(GradientBucket& bk, std::size_t b) override {
    return where_ == Where::collective_async ? async_[b].test() : bk.done.test();
  }
  void gather(GradientBuckets& buckets) override {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      buckets[b].buffer.impl()->storage()->take_memory();  // (a wrap unit's bucket may have given it back)
      comm_.allgather_raw(sums_[b].raw_data(), buckets[b].buffer.raw_data(), static_cast<std::size_t>(sums_[b].numel()),
                          buckets[b].dtype);
    }
  }

 private:
  // What the collective's ireduce_scatter returns (collective::Work, or Mpi's own handle).
  using AsyncWork = decltype(std::declval<C&>().ireduce_scatter(std::span<const float>{}, std::span<float>{}, ReduceOp::Sum));
  AsyncWork start_async(GradientBucket& bk, std::size_t b) {
    observe::ScopedEvent ev("ireduce_scatter", "communication", static_cast<std::int64_t>(b), static_cast<std::int64_t>(bk.bytes()));
    const Tensor& sum = sums_[b];
    const auto n = static_cast<std::size_t>(sum.numel());
    if (bk.dtype == DType::f64)
      return comm_.ireduce_scatter(std::span<const double>(bk.buffer.template device_data<double>(), bk.count),
                                   std::span<double>(sum.template device_data<double>(), n), ReduceOp::Sum);
    return comm_.ireduce_scatter(std::span<const float>(bk.buffer.template device_data<float>(), bk.count),
                                 std::span<float>(sum.template device_data<float>(), n), ReduceOp::Sum);
  }
  void run(GradientBucket& bk, std::size_t b) {
    timed_reduction(bk, b, [&] {
      comm_.reduce_scatter_raw(bk.buffer.raw_data(), sums_[b].raw_data(), static_cast<std::size_t>(sums_[b].numel()),
                               bk.dtype, ReduceOp::Sum);
    }, "reduce_scatter");
  }

  C& comm_;
  GradientBuckets& buckets_;
  const std::vector<Tensor>& sums_;
  Where where_;
  std::vector<AsyncWork> async_ = std::vector<AsyncWork>(buckets_.size());  // collective_async: each bucket's, this step
  BucketThread thread_;  // last: its thread stops before the members its jobs use go
};

template <class C>
  requires collective::ThreadGroupCollective<C>
class ShardedReduction final : public BucketReduction<C> {
 public:
  /// Registers `buckets`' buffers as replica `s.replica`'s in the group.
  ShardedReduction(C& comm, GradientSharding s, GradientBuckets& buckets) : comm_(comm), s_(std::move(s)) {
    STRATA_CHECK(s_.group && s_.split && s_.replica == comm_.rank() && s_.group->replicas() == comm_.size(),
                 "GradientEngine: sharded as replica ", s_.replica, " of a group of ", s_.group ? s_.group->replicas() : 0,
                 ", rank ", comm_.rank(), " of ", comm_.size());
    std::vector<Tensor> buffers;
    for (std::size_t b = 0; b < buckets.size(); ++b) buffers.push_back(buckets[b].buffer);
    s_.group->attach(s_.replica, std::move(buffers));
  }

  // The step's first bucket decides, inside the collective (every replica reads replica 0's
  // word there), whether the step's sums stay in shares; the others follow it.
  bool start(GradientBucket& bk, std::size_t b) override {
    if (b == 0) ++step_;
    timed_reduction(bk, b, [&] {
      in_shares_ = comm_.allreduce_or_share_raw(bk.buffer.raw_data(), bk.count, bk.dtype, ReduceOp::Sum,
                                                [&] { return b == 0 ? s_.split->will_split(s_.replica) : in_shares_; });
    });
    if (in_shares_) s_.group->reduced(s_.replica, b, step_);
    return in_shares_;
  }

  void gather(GradientBuckets& buckets) override {
    for (std::size_t b = 0; b < buckets.size(); ++b)
      s_.group->gather(s_.replica, b, step_, comm_.options().timeout, [this] { return comm_.aborted(); });
  }

 private:
  C& comm_;
  GradientSharding s_;
  std::uint64_t step_ = 0;  // steps reduced so far (the group's step stamps)
  bool in_shares_ = false;  // the way this step's first bucket decided
};

}  // namespace strata::detail

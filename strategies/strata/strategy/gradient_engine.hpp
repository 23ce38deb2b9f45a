/// \file
/// GradientEngine: one replica's gradient all-reduce, overlapped with its backward pass.
///
/// The parameters are packed, last first (the order backward finishes them), into buckets of
/// about `bucket_bytes`; each parameter's gradient *is* a view into its bucket's flat buffer,
/// so backward writes it there and nothing is copied. A hook on every parameter counts the
/// bucket down; when a bucket's last gradient is final its all-reduce starts at once, while
/// backward goes on with the earlier layers. Buckets start strictly in index order, so every
/// replica issues the same collectives in the same order even when gradients finish in a
/// different order. finish() (from apply_gradients) starts what is left — parameters that got
/// no gradient in this pass — and waits for all.
///
/// How a bucket's all-reduce runs depends on the collective: InProcess replicas are threads
/// of one process, and the reduction is memory-bound work, so the replica reduces the bucket
/// itself, right away, with its peers (no extra thread); so do Mpi and Gloo ranks whose
/// buckets are in shared memory on a host with no core to spare
/// (shared_buckets_reduce_on_replica_thread).
/// Otherwise the engine's own communication thread runs the policy's blocking all-reduce,
/// bucket after bucket, while backward computes (Horovod's background thread): measured
/// faster than MPI_Iallreduce, which progresses only inside MPI calls and runs a slower
/// schedule (docs/gradient_engine.md).
///
/// Sharded (GradientLayout::sharded, InProcess replicas that split the update): in a step
/// whose update splits, each bucket's reduction leaves the sum in this replica's share only
/// (allreduce_or_share_raw), and the engine completes the rest from the other replicas
/// (ShardedGradients) when the gradients are read through Gradients; apply_gradients
/// consumes them. A step whose update does not split reduces whole, as without sharding.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>  // hardware_concurrency
#include <type_traits>
#include <utility>  // exchange
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/collective/async.hpp>     // Work
#include <strata/collective/capabilities.hpp>
#include <strata/collective/detail/reduce.hpp>  // share_begin
#include <strata/collective/detail/wait_policy.hpp>  // WaitTimer
#include <strata/collective/in_process.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/optim/nonfinite.hpp>
#include <strata/optim/optimizer.hpp>  // ElementRange
#include <strata/runtime/process.hpp>  // env, env_int
#include <strata/strategy/sharded_gradients.hpp>
#include <strata/strategy/split_update.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/factory.hpp>
#include <strata/tensor/half.hpp>

namespace strata {

/// Bucket size of the gradient engine when neither the strategy's options nor
/// STRATA_BUCKET_BYTES say otherwise; docs/gradient_engine.md has the measurement behind it.
inline constexpr std::size_t kDefaultBucketBytes = std::size_t{1} << 20;

/// STRATA_BUCKET_BYTES if set (checked: 1 byte .. 4 GiB), else kDefaultBucketBytes.
inline std::size_t default_bucket_bytes() {
  const char* v = runtime::detail::env("STRATA_BUCKET_BYTES");
  if (!v) return kDefaultBucketBytes;
  return static_cast<std::size_t>(runtime::detail::env_int("STRATA_BUCKET_BYTES", v, 1, 4L << 30));
}

/// Gradient compression on the wire (Horovod's Compression.fp16): float32 buckets travel as
/// 16-bit floats, each partial sum added in float32 and rounded back. Halves the bytes; the
/// all-reduced gradient is within (2N-1)·u·Σ|g_r| of the exact sum (N replicas; u = 2^-11
/// for fp16, 2^-8 for bf16; fp16 also flushes magnitudes below 2^-24). Multi-process
/// collectives only: InProcess replicas share memory and have no wire.
enum class Compression { none, fp16, bf16 };

/// Where an engine's communication time went, summed over steps.
struct GradientStats {
  std::int64_t steps = 0;
  double reduce_seconds = 0;   ///< inside the all-reduces (on whichever thread ran them)
  double exposed_seconds = 0;  ///< the replica thread blocked on them (the part not hidden)
  /// The share of all-reduce time that backward hid (0 when the replica ran it itself).
  double hidden_share() const noexcept {
    return reduce_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / reduce_seconds) : 0.0;
  }
  GradientStats& operator+=(const GradientStats& o) noexcept {
    steps += o.steps;
    reduce_seconds += o.reduce_seconds;
    exposed_seconds += o.exposed_seconds;
    return *this;
  }
};

namespace detail {
/// True for collectives whose all-reduce the replica thread runs itself (its peers are
/// threads of this process, sharing its memory).
template <class C>
inline constexpr bool reduces_on_replica_thread = collective::ThreadGroupCollective<C>;

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
}  // namespace detail

template <class C>
class GradientEngine final : public autograd::GradientCompletion {
 public:
  GradientEngine(C& comm, const std::vector<Tensor>& params, std::size_t bucket_bytes = default_bucket_bytes(),
                 Compression compression = Compression::none)
      : comm_(comm), params_(params), compression_(compression), state_(std::make_shared<HookState>()) {
    STRATA_CHECK(bucket_bytes > 0, "gradient bucket size must be positive");
    STRATA_CHECK(compression == Compression::none || collective::WireCompression<C>,
                 "gradient compression applies to multi-process collectives; ", C::name, " replicas share memory");
    state_->engine = this;
    slot_of_.resize(params_.size());
    fired_.assign(params_.size(), false);
    // Buckets, last parameter first; a dtype change starts a new bucket.
    for (std::size_t k = params_.size(); k-- > 0;) {
      const Tensor& p = params_[k];
      STRATA_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "GradientEngine: parameter ", k,
                   " is not a leaf that requires gradients");
      STRATA_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, "GradientEngine: parameter ", k, " is ",
                   name_of(p.dtype()), "; gradients are all-reduced in float32 or float64");
      if (buckets_.empty() || buckets_.back().dtype != p.dtype() || buckets_.back().bytes >= bucket_bytes)
        buckets_.emplace_back().dtype = p.dtype();
      Bucket& b = buckets_.back();
      slot_of_[k] = Slot{buckets_.size() - 1, b.count};
      b.members.push_back(k);
      b.count += static_cast<std::size_t>(p.numel());
      b.bytes += p.nbytes();
    }
    const Device device = params_.empty() ? Device::cpu() : params_.front().device();
    for (const Tensor& p : params_)
      STRATA_CHECK(p.device() == device, "GradientEngine: parameters on ", device, " and ", p.device(),
                   "; one replica's parameters share a device");
    STRATA_CHECK(compression == Compression::none || device.kind == DeviceKind::cpu,
                 "gradient compression of parameters on ", device, " is not supported yet");
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bk = buckets_[b];
      // On the parameters' device: the gradients are views of it, and a device collective
      // (Nccl) reduces it where it is.
      bk.buffer = make_bucket(static_cast<std::int64_t>(bk.count), bk.dtype, device, bk.shared).fill_(0.0);
      if (compression_ != Compression::none && bk.dtype == DType::f32)
        bk.wire = Tensor::empty(Shape{static_cast<std::int64_t>(bk.count)},
                                compression_ == Compression::fp16 ? DType::f16 : DType::bf16);
      bk.pending = bk.members.size();
      for (std::size_t k : bk.members) bind_grad(k);
    }
    if constexpr (!detail::reduces_on_replica_thread<C>)
      reduce_here_ = !buckets_.empty() &&
                     std::all_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.shared; }) &&
                     detail::shared_buckets_reduce_on_replica_thread(comm_.size());
    for (std::size_t k = 0; k < params_.size(); ++k)
      params_[k].register_hook([st = state_, k](const Tensor&) {
        if (st->engine) st->engine->ready(k);
      });
  }
  ~GradientEngine() {
    state_->engine = nullptr;
    if (sharded_ && params_[0].impl()->ag.completion == this) autograd::set_gradient_completion(params_[0], nullptr);
  }
  GradientEngine(const GradientEngine&) = delete;
  GradientEngine& operator=(const GradientEngine&) = delete;

  /// True if `g` is the parameter list this engine serves.
  bool owns(const Gradients& g) const noexcept {
    return g.of(params_);
  }
  std::size_t num_buckets() const noexcept { return buckets_.size(); }
  /// Parameters in bucket `b`, in the order they were packed.
  const std::vector<std::size_t>& bucket_members(std::size_t b) const { return buckets_.at(b).members; }

  /// For each parameter, the elements replica `r` of `n` reduces when an InProcess group
  /// all-reduces the buckets (its share of each bucket): where it updates when the strategy
  /// splits the update, so the summed gradient it reads is the one it has just written.
  std::vector<optim::ElementRange> shares(int r, int n) const {
    std::vector<optim::ElementRange> out(params_.size());
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const Slot s = slot_of_[k];
      const std::size_t count = buckets_[s.bucket].count, numel = static_cast<std::size_t>(params_[k].numel());
      const std::size_t lo = std::clamp(collective::detail::share_begin(count, r, n), s.offset, s.offset + numel);
      const std::size_t hi = std::clamp(collective::detail::share_begin(count, r + 1, n), s.offset, s.offset + numel);
      out[k] = {static_cast<std::int64_t>(lo - s.offset), static_cast<std::int64_t>(hi - s.offset)};
    }
    return out;
  }

  /// The bucket buffers, in bucket order (every gradient is a view of one).
  std::vector<Tensor> bucket_buffers() const {
    std::vector<Tensor> out;
    for (const Bucket& b : buckets_) out.push_back(b.buffer);
    return out;
  }

  /// From now on, in the steps whose update `split` splits, replica `r` of `group` reduces
  /// only its share of each bucket and completes the rest on demand (GradientLayout::sharded);
  /// `group` holds every replica's buffers.
  void shard(std::shared_ptr<detail::ShardedGradients> group, int r, const detail::SplitUpdate& split)
    requires detail::reduces_on_replica_thread<C>
  {
    STRATA_CHECK(group && r == comm_.rank() && group->replicas() == comm_.size(), "GradientEngine::shard: replica ",
                 r, " of a group of ", group ? group->replicas() : 0, ", rank ", comm_.rank(), " of ", comm_.size());
    sharded_ = std::move(group);
    split_ = &split;
    if (!params_.empty()) autograd::set_gradient_completion(params_[0], this);
  }
  /// Whether this step's buckets were reduced to shares (gathered since, or not).
  bool sharded_step() const noexcept { return step_sharded_; }

  /// Whether this step's buckets are kept in shares and not yet handed to a Gradients: what
  /// grad() on this replica's thread asks once its backward pass is done.
  bool claim() noexcept override { return std::exchange(unclaimed_, false); }

  /// Every gradient whole: under the sharded layout, waits for the buckets and copies in the
  /// other replicas' shares; else nothing to do. After apply_gradients (consume()) the other
  /// replicas may already be overwriting their buffers, so it is an error then.
  void make_whole() override {
    if (whole_) return;
    STRATA_CHECK(!consumed_, "gradients read after apply_gradients under GradientLayout::sharded: each replica "
                 "now holds the summed gradients only in its own share; read them before apply_gradients, or use "
                 "GradientLayout::whole");
    if constexpr (detail::reduces_on_replica_thread<C>) {
      if (open_) settle();  // read before apply_gradients: the buckets not started yet start now (and decide)
      if (step_sharded_)
        for (std::size_t b = 0; b < buckets_.size(); ++b)
          sharded_->gather(comm_.rank(), b, shard_step_, comm_.options().timeout, [this] { return comm_.aborted(); });
    }
    whole_ = true;
  }
  /// The end of apply_gradients: gradients still in shares stay so, and reading them is an error.
  void consume() noexcept {
    if (!whole_) consumed_ = true;
    step_sharded_ = false;
  }

  /// Off: backward passes leave gradients local (NoSync).
  void set_sync(bool on) noexcept { sync_ = on; }
  bool sync() const noexcept { return sync_; }

  /// Waits for the buckets already started: a collective the replica issues itself (e.g.
  /// ReplicaContext::all_reduce) then follows them in the same order on every rank.
  void drain() {
    const auto t0 = Clock::now();
    const collective::detail::WaitTimer waiting;
    for (std::size_t b = 0; b < next_; ++b) buckets_[b].done.wait();
    stats_.exposed_seconds += seconds_since(t0);
  }

  const GradientStats& stats() const noexcept { return stats_; }
  /// Under NonFinite::error: the first parameter whose own gradient held a NaN or Inf in the
  /// last step, before the sum; -1 if none.
  std::int64_t local_nonfinite() const noexcept { return local_nonfinite_; }

  /// Every bucket reduced (the sum over all replicas), then ready for the next step.
  void finish() {
    STRATA_CHECK(sync_, "apply_gradients inside NoSync: the gradients would stay local to each replica; leave "
                 "the NoSync scope for the last micro-batch");
    settle();
    for (auto& bk : buckets_) bk.done = collective::Work();
    ++stats_.steps;
    open_ = false;
    for (auto& bk : buckets_) {
      stats_.reduce_seconds += bk.seconds;  // written by the thread that ran it, before `done`
      bk.seconds = 0;
      bk.pending = bk.members.size();
    }
    std::fill(fired_.begin(), fired_.end(), false);
    next_ = 0;
  }

 private:
  struct Slot {
    std::size_t bucket = 0, offset = 0;
  };
  struct Bucket {
    DType dtype = DType::f32;
    std::vector<std::size_t> members;
    std::size_t count = 0, bytes = 0, pending = 0;
    Tensor buffer;
    Tensor wire;  // the 16-bit copy a compressed bucket travels as
    bool shared = false;  // `buffer` is in memory the ranks share (make_bucket)
    collective::Work done;
    std::shared_ptr<collective::Work::State> state;  // `done`'s state, re-armed each step
    double seconds = 0;  // its all-reduce's duration in this step
  };
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  struct HookState {
    GradientEngine* engine = nullptr;
  };

  /// A bucket's buffer: in memory the ranks share when the collective offers it (processes on
  /// one host: the all-reduce then reduces across the ranks' copies directly), else a plain
  /// tensor on `device`. Collective when offered: every rank makes the same buckets in order.
  Tensor make_bucket(std::int64_t count, DType dtype, Device device, bool& shared) {
    if constexpr (collective::HostSharedMemory<C>)
      if (device.kind == DeviceKind::cpu && compression_ == Compression::none)
        if (Tensor t = comm_.shared_buffer(count, dtype); t.defined()) {
          shared = true;
          return t;
        }
    return Tensor::empty(Shape{count}, dtype, device);
  }

  /// Makes parameter k's gradient the view of its bucket slot (copying what it held).
  void bind_grad(std::size_t k) {
    const Tensor& p = params_[k];
    const Slot s = slot_of_[k];
    Tensor& buf = buckets_[s.bucket].buffer;
    auto& g = p.impl()->ag.grad;
    void* want = static_cast<char*>(buf.raw_data()) + s.offset * size_of(p.dtype());
    if (g.defined() && g.raw_data() == want) return;
    Tensor view = detail::make_view(buf, p.shape(), contiguous_strides(p.shape()), static_cast<std::int64_t>(s.offset));
    if (g.defined() && g.shape() == p.shape())
      view.copy_(g);
    else
      view.fill_(0.0);
    g = std::move(view);
  }

  bool fired(std::size_t k) const noexcept { return fired_[k]; }

  // Starts the buckets not started yet (parameters that got no gradient in this pass: grad()
  // has left zeros, or the accumulation) and waits for all.
  void settle() {
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (!fired(k)) {
        bind_grad(k);
        mark(k);
      }
    launch_ready();
    const auto t0 = Clock::now();
    const collective::detail::WaitTimer waiting;
    for (auto& bk : buckets_) bk.done.wait();
    stats_.exposed_seconds += seconds_since(t0);
  }

  // The first bucket of a step: under the sharded layout, the gradients are in shares from
  // now on, and the Gradients that grad() returns next carries this engine to complete them.
  void open_step() {
    open_ = true;
    local_nonfinite_ = -1;
    if (!sharded_) return;
    ++shard_step_;
    whole_ = consumed_ = decided_ = false;
    unclaimed_ = true;
  }

  void mark(std::size_t k) {
    fired_[k] = true;
    Bucket& bk = buckets_[slot_of_[k].bucket];
    --bk.pending;
  }

  // A hook: parameter k's gradient of this pass is final.
  void ready(std::size_t k) {
    if (!sync_) return;
    STRATA_CHECK(!fired(k), "the gradient of parameter ", k, " became final twice before apply_gradients: two "
                 "backward passes in one step need NoSync for all but the last (gradient accumulation)");
    bind_grad(k);  // a no-op unless something replaced the gradient tensor
    mark(k);
    launch_ready();
  }

  // The bucket's sum with 16-bit elements on the wire (see Compression); false, doing
  // nothing, where the bucket travels as it is.
  bool reduce_compressed(void* p, Bucket& bk) {
    if constexpr (collective::WireCompression<C>) {
      if (!bk.wire.defined()) return false;
      if (compression_ == Compression::fp16)
        reduce_16bit<Half>(static_cast<float*>(p), bk);
      else
        reduce_16bit<BFloat16>(static_cast<float*>(p), bk);
      return true;
    } else {
      (void)p, (void)bk;
      return false;
    }
  }
  template <class S>
  void reduce_16bit(float* g, Bucket& bk) {
    S* w = static_cast<S*>(bk.wire.raw_data());
    for (std::size_t i = 0; i < bk.count; ++i) w[i] = S(g[i]);
    comm_.allreduce_sum16_raw(w, bk.count, bk.wire.dtype());
    for (std::size_t i = 0; i < bk.count; ++i) g[i] = static_cast<float>(w[i]);
  }

  // Starts the buckets that are complete, in index order.
  void launch_ready() {
    if (!open_) open_step();
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
      Bucket& bk = buckets_[next_++];
      if (optim::detail::local_nonfinite_checks().load(std::memory_order_relaxed)) note_nonfinite(bk);
      if (reduce_here_) {
        reduce_here(bk, next_ - 1);
      } else if constexpr (!detail::reduces_on_replica_thread<C>) {
        // One State per bucket, re-armed, and a job small enough for std::function to hold
        // inline: handing a bucket to the communication thread allocates nothing.
        if (!bk.state) bk.state = std::make_shared<collective::Work::State>();
        bk.state->reset();
        bk.done = collective::Work(bk.state);
        worker_.enqueue([this, b = next_ - 1] { reduce_on_comm_thread(buckets_[b]); });
      }
    }
  }

  // Bucket b's all-reduce on the calling (replica) thread.
  void reduce_here(Bucket& bk, std::size_t b) {
    void* p = bk.buffer.raw_data();
    const auto t0 = Clock::now();
    observe::ScopedEvent ev("allreduce", "communication", static_cast<std::int64_t>(b),
                            static_cast<std::int64_t>(bk.count * size_of(bk.dtype)));
    if (!reduce_sharded(p, bk, b)) comm_.allreduce_raw(p, p, bk.count, bk.dtype, ReduceOp::Sum);
    bk.seconds = seconds_since(t0);
    stats_.exposed_seconds += bk.seconds;
  }

  // Under the sharded layout, bucket b's reduction: to this replica's share where the step's
  // update splits, else whole. The step's first bucket decides, inside the collective (every
  // replica reads replica 0's word there), and the others follow it. False where not sharded.
  bool reduce_sharded(void* p, Bucket& bk, std::size_t b) {
    if constexpr (detail::reduces_on_replica_thread<C>) {
      if (!sharded_) return false;
      const int r = comm_.rank();
      const bool first = !decided_;
      step_sharded_ = comm_.allreduce_or_share_raw(p, bk.count, bk.dtype, ReduceOp::Sum,
                                                   [&] { return first ? split_->will_split(r) : step_sharded_; });
      decided_ = true;
      whole_ = !step_sharded_;
      if (step_sharded_) sharded_->reduced(r, b, shard_step_);
      return true;
    } else {
      (void)p, (void)bk, (void)b;
      return false;
    }
  }

  // NonFinite::error: this replica's own gradients in `bk`, before the sum; keeps the lowest
  // parameter index holding a NaN or Inf.
  void note_nonfinite(const Bucket& bk) {
    for (std::size_t k : bk.members)
      if ((local_nonfinite_ < 0 || static_cast<std::int64_t>(k) < local_nonfinite_) &&
          !optim::all_finite(params_[k].grad()))
        local_nonfinite_ = static_cast<std::int64_t>(k);
  }

  // The communication thread's work for one bucket.
  void reduce_on_comm_thread(Bucket& bk)
    requires(!detail::reduces_on_replica_thread<C>)
  {
    thread_local const bool named = (observe::Timeline::instance().name_thread("communication"), true);
    (void)named;
    collective::detail::complete(*bk.state, [&] {
      const auto t0 = Clock::now();
      observe::ScopedEvent ev("allreduce", "communication", &bk - buckets_.data(),
                              static_cast<std::int64_t>(bk.count * size_of(bk.dtype)));
      void* p = bk.buffer.raw_data();
      if (!reduce_compressed(p, bk)) comm_.allreduce_raw(p, p, bk.count, bk.dtype, ReduceOp::Sum);
      bk.seconds = seconds_since(t0);
    });
  }

  C& comm_;
  std::vector<Tensor> params_;
  Compression compression_;
  std::vector<Slot> slot_of_;
  std::vector<Bucket> buckets_;
  std::vector<bool> fired_;
  std::size_t next_ = 0;
  std::int64_t local_nonfinite_ = -1;
  bool sync_ = true;
  bool open_ = false;  // a step's first bucket has started, and finish() has not come yet
  std::shared_ptr<detail::ShardedGradients> sharded_;  // GradientLayout::sharded: every replica's buffers
  std::uint64_t shard_step_ = 0;  // steps whose buckets were reduced to shares
  const detail::SplitUpdate* split_ = nullptr;  // whose way decides whether a step is sharded
  bool whole_ = true, consumed_ = false, step_sharded_ = false, decided_ = false;
  bool unclaimed_ = false;  // a sharded step opened, and no Gradients carries this engine yet
  bool reduce_here_ = detail::reduces_on_replica_thread<C>;  // all-reduces on the replica's thread
  std::shared_ptr<HookState> state_;
  GradientStats stats_;
  collective::detail::AsyncWorker worker_;
};

}  // namespace strata

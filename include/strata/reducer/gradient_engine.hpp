/// \file
/// GradientEngine: one replica's gradient all-reduce, overlapped with its backward pass.
///
/// The parameters are packed, last first, into buckets (detail::GradientBuckets); each
/// parameter's gradient *is* a view into its bucket's flat buffer, so backward writes it there
/// and nothing is copied. A hook on every parameter counts the bucket down; when a bucket's
/// last gradient is final its all-reduce starts at once, while backward goes on with the
/// earlier layers. Buckets start strictly in index order, so every replica issues the same
/// collectives in the same order even when gradients finish in a different order. finish()
/// (the update protocol's aggregate stage) starts what is left — parameters that got no
/// gradient in this pass — and waits for all.
///
/// The engine is assembled from parts, each chosen once when it is made:
///   detail::GradientBuckets   the packing, the buffers and the gradients bound to them;
///   detail::BucketReduction   how a bucket's all-reduce runs: on the replica's thread, on a
///                             communication thread (with detail::WireCompressor), or to
///                             shares under GradientLayout::sharded (bucket_reduction.hpp);
///   detail::NonfiniteWatch    this replica's own non-finite gradients, before the sum;
///   detail::RowAggregation    a row-sparse table's sum, by rows gathered where that moves
///                             fewer bytes, else dense (row_aggregation.hpp). A table has a
///                             bucket of its own, skipped by the in-order launches: finish()
///                             aggregates the tables after the other buckets, in one order
///                             on every replica (with whole gradients; under
///                             GradientLayout::sharded a table is one more dense bucket).
/// Where a step's sums stand under the sharded layout is a detail::ShardedStep, which only
/// engines over replicas that are threads carry (sharded_step.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/collective/capabilities.hpp>
#include <strata/collective/detail/wait_policy.hpp>  // WaitTimer
#include <strata/collective/in_process.hpp>
#include <strata/optim/optimizer.hpp>  // ElementRange
#include <strata/reducer/bucket_reduction.hpp>
#include <strata/reducer/gradient_buckets.hpp>
#include <strata/reducer/nonfinite_watch.hpp>
#include <strata/reducer/options.hpp>
#include <strata/reducer/row_aggregation.hpp>
#include <strata/reducer/sharded_step.hpp>
#include <strata/runtime/process.hpp>  // env, env_int
#include <strata/support/check.hpp>

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

/// Where an engine's communication time went, summed over steps.
struct GradientStats {
  std::int64_t steps = 0;
  double reduce_seconds = 0;   ///< inside the all-reduces (on whichever thread ran them)
  double exposed_seconds = 0;  ///< the replica thread blocked on them (the part not hidden)
  /// Row-sparse tables (docs/design/sparse_tables.md): aggregations that gathered rows, and those
  /// that all-reduced the table dense; the bytes this replica sent for them, and the lower
  /// bound, its touched rows and their indices.
  std::int64_t tables_gathered = 0, tables_dense = 0;
  double table_bytes_sent = 0, table_touched_bytes = 0;
  /// The share of all-reduce time that backward hid (0 when the replica ran it itself).
  double hidden_share() const noexcept {
    return reduce_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / reduce_seconds) : 0.0;
  }
  GradientStats& operator+=(const GradientStats& o) noexcept {
    steps += o.steps;
    reduce_seconds += o.reduce_seconds;
    exposed_seconds += o.exposed_seconds;
    tables_gathered += o.tables_gathered;
    tables_dense += o.tables_dense;
    table_bytes_sent += o.table_bytes_sent;
    table_touched_bytes += o.table_touched_bytes;
    return *this;
  }
};

template <class C>
class GradientEngine final : public autograd::GradientCompletion {
 public:
  /// Where the engine is in a step, as state() reports it. Whole layout: idle → open → idle.
  /// Sharded layout (GradientLayout::sharded): detail::ShardedStep's states, its `whole`
  /// reported as open while a step's gradients come in and idle after finish().
  enum class StepState : std::uint8_t {
    idle,       ///< no bucket of a step started; gradients whole
    deciding,   ///< sharded layout: the step began, its first bucket not reduced yet
    open,       ///< the step's buckets are being reduced whole
    sharing,    ///< the step's buckets are being reduced to this replica's shares
    in_shares,  ///< every bucket reduced; the sums in shares only
    gathered,   ///< the sums were in shares, now whole (read before apply_gradients)
    consumed,   ///< apply_gradients has used the sums in shares; reading them is an error
  };

  /// `sharding`: this replica's place under GradientLayout::sharded (InProcess replicas
  /// only); its default leaves every step's sums whole.
  GradientEngine(C& comm, const std::vector<Tensor>& params, std::size_t bucket_bytes = default_bucket_bytes(),
                 Compression compression = Compression::none, detail::GradientSharding sharding = {})
      : comm_(comm),
        compression_(checked(compression, params)),
        in_blocks_mode_(sharding.in_blocks),
        scatter_(sharding.scatter),
        release_(sharding.scatter && sharding.release),
        buckets_(params, bucket_bytes, [this](std::int64_t n, DType dt, Device d, bool& shared) { return make_buffer(n, dt, d, shared); },
                 sharding.blocks, sharding.units, /*lazy_units=*/!sharding.units.empty(),
                 /*released=*/release_),
        block_sums_(make_block_sums(sharding)),
        path_(choose_path(std::move(sharding))),
        fired_(params.size(), false),
        hooks_(std::make_shared<HookState>()) {
    hooks_->engine = this;
    const std::vector<Tensor>& ps = buckets_.params();
    for (std::size_t k = 0; k < ps.size(); ++k)
      if (!by_rows(k))  // a table's gradient stays rows until finish() (a hook would make it dense)
        Tensor(ps[k]).register_hook([st = hooks_, k](const Tensor&) {
        if (st->engine) st->engine->ready(k);
      });
    // A read of the Gradients that grad() returns completes them (claim, make_whole).
    if (!ps.empty()) autograd::set_gradient_completion(ps[0], this);
  }
  ~GradientEngine() {
    hooks_->engine = nullptr;
    const std::vector<Tensor>& ps = buckets_.params();
    if (!ps.empty() && ps[0].impl()->ag.completion == this) autograd::set_gradient_completion(ps[0], nullptr);
  }
  GradientEngine(const GradientEngine&) = delete;
  GradientEngine& operator=(const GradientEngine&) = delete;

  /// True if `g` is the parameter list this engine serves.
  bool owns(const Gradients& g) const noexcept { return g.of(buckets_.params()); }
  std::size_t num_buckets() const noexcept { return buckets_.size(); }
  /// Parameters in bucket `b`, in the order they were packed.
  const std::vector<std::size_t>& bucket_members(std::size_t b) const { return buckets_.plan().buckets().at(b).members; }
  /// Each parameter's share for replica `r` of `n` (detail::BucketPlan::shares).
  std::vector<optim::ElementRange> shares(int r, int n) const { return buckets_.plan().shares(r, n); }
  /// The packing (with its blocks, where made with GradientSharding::blocks).
  const detail::BucketPlan& plan() const noexcept { return buckets_.plan(); }
  /// Made with blocks: this rank's block of bucket b's sum, once finish() returned (a tensor of
  /// its own where the buckets are reduce-scattered, else a view of the bucket).
  const Tensor& block_sum(std::size_t b) const { return block_sums_.at(b); }
  /// Bucket b's flat gradient buffer (each of its parameters' gradients a view of it).
  const Tensor& bucket_buffer(std::size_t b) const { return buckets_[b].buffer; }

  StepState state() const noexcept {
    switch (step_.sums()) {
      case detail::StepSums::deciding: return StepState::deciding;
      case detail::StepSums::sharing: return StepState::sharing;
      case detail::StepSums::in_shares: return StepState::in_shares;
      case detail::StepSums::gathered: return StepState::gathered;
      case detail::StepSums::consumed: return StepState::consumed;
      case detail::StepSums::whole: break;
    }
    return marked_ > 0 ? StepState::open : StepState::idle;
  }
  /// Whether this step's buckets were reduced to shares (gathered since, or not).
  bool sharded_step() const noexcept { return step_.sharded(); }

  /// Whether this step's sums are kept in shares, so the Gradients that grad() returns must
  /// carry this engine to complete them (asked by grad() once its backward pass is done).
  /// Whole layout, its buckets summed on a communication thread: whether they may still be in
  /// flight, so that a read of the Gradients waits for them.
  bool claim() noexcept override {
    if (scatter_) return in_blocks_;
    if (sharded_) return step_.claims();
    return marked_ > 0;
  }
  bool in_shares() const noexcept override { return sharded_; }

  /// Every gradient whole: under the sharded layout, waits for the buckets and copies in the
  /// other replicas' shares; else nothing to do. After apply_gradients (consume()) the other
  /// replicas may already be overwriting their buffers, so it is an error then.
  void make_whole() override {
    if (!sharded_ && !scatter_) {  // whole: the buckets in flight waited for
      if (marked_ > 0) settle();
      return;
    }
    if (scatter_) {  // reduce-scattered: each block all-gathered into its bucket (collective)
      if (!in_blocks_) return;
      if (marked_ > 0) settle();
      path_->gather(buckets_);
      in_blocks_ = false;
      return;
    }
    STRATA_CHECK(step_.readable(), "gradients read after apply_gradients under GradientLayout::sharded: "
                 "each replica now holds the summed gradients only in its own share; read them before "
                 "apply_gradients, or use GradientLayout::whole");
    if (step_.unsettled()) settle();  // read before apply_gradients: the buckets not started yet start now (and decide)
    if (step_.in_shares()) {
      path_->gather(buckets_);
      step_.gathered();
    }
  }
  /// The end of apply_gradients: gradients still in shares stay so, and reading them is an error.
  void consume() noexcept { step_.consume(); }

  /// Off: backward passes leave gradients local (NoSync).
  void set_sync(bool on) noexcept { sync_ = on; }
  bool sync() const noexcept { return sync_; }

  /// Waits for the buckets already started: a collective the replica issues itself (e.g.
  /// ReplicaContext::all_reduce) then follows them in the same order on every rank.
  void drain() {
    const auto t0 = Clock::now();
    const collective::detail::WaitTimer waiting;
    for (std::size_t b = 0; b < next_; ++b) path_->wait(buckets_[b], b);
    stats_.exposed_seconds += seconds_since(t0);
  }
  /// Whether bucket b's reduction of this step has started and completed (without waiting).
  bool reduced(std::size_t b) { return b < next_ && path_->test(buckets_[b], b); }
  /// Waits for bucket b's reduction of this step, where it has started.
  void wait_reduced(std::size_t b) {
    if (b < next_) path_->wait(buckets_[b], b);
  }

  const GradientStats& stats() const noexcept { return stats_; }
  /// Under NonFinite::error: the first parameter whose own gradient held a NaN or Inf in the
  /// last step, before the sum; -1 if none.
  std::int64_t local_nonfinite() const noexcept { return nonfinite_.first(); }

  /// Every bucket reduced (the sum over all replicas), then ready for the next step.
  void finish() {
    STRATA_CHECK(sync_, "apply_gradients inside NoSync: the gradients would stay local to each replica; leave "
                 "the NoSync scope for the last micro-batch");
    settle();
    release_reduced();
    ++stats_.steps;
    for (detail::GradientBucket& bk : buckets_) {
      stats_.reduce_seconds += bk.seconds;  // written by the thread that ran it, before `done`
      bk.seconds = 0;
    }
    buckets_.rearm();
    std::fill(fired_.begin(), fired_.end(), false);
    marked_ = next_ = released_ = 0;
    settled_ = false;
    step_.finished();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  struct HookState {  // outlives the engine in the parameters' hooks
    GradientEngine* engine = nullptr;
  };

  static Compression checked(Compression c, const std::vector<Tensor>& params) {
    STRATA_CHECK(c == Compression::none || collective::WireCompression<C>,
                 "gradient compression applies to multi-process collectives; ", C::name, " replicas share memory");
    STRATA_CHECK(c == Compression::none || params.empty() || params.front().device().kind == DeviceKind::cpu,
                 "gradient compression of parameters on ", params.front().device(), " is not supported yet");
    return c;
  }

  /// A bucket's buffer: in memory the ranks share when the collective offers it (processes on
  /// one host: the all-reduce then reduces across the ranks' copies directly), else a plain
  /// tensor on `device`. Collective when offered: every rank makes the same buckets in order.
  Tensor make_buffer(std::int64_t count, DType dtype, Device device, bool& shared) {
    if constexpr (collective::HostSharedMemory<C>)  // (in blocks: each rank's own memory, never shared)
      if (device.kind == DeviceKind::cpu && compression_ == Compression::none && !in_blocks_mode_)
        if (Tensor t = comm_.shared_buffer(count, dtype); t.defined()) {
          shared = true;
          return t;
        }
    return Tensor::empty(Shape{count}, dtype, device);
  }

  // In blocks: this rank's block of each bucket's sum, its own tensor where reduce-scattered.
  std::vector<Tensor> make_block_sums(const detail::GradientSharding& s) {
    std::vector<Tensor> out;
    if (!in_blocks_mode_) return out;
    STRATA_CHECK(s.blocks == comm_.size() && !s.group, "GradientEngine: buckets in ", s.blocks, " blocks over ",
                 comm_.size(), " ranks");
    STRATA_CHECK(compression_ == Compression::none, "GradientEngine: buckets in blocks take no wire compression yet");
    const detail::BucketPlan& plan = buckets_.plan();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      STRATA_CHECK(!plan.buckets()[b].table, "GradientEngine: row-sparse tables cannot be sharded yet");
      const auto block = static_cast<std::int64_t>(plan.block(b));
      const Tensor& buf = buckets_[b].buffer;
      out.push_back(s.scatter ? Tensor::empty(Shape{block}, buf.dtype(), buf.device()).fill_(0.0)
                              : detail::make_view(buf, Shape{block}, Shape{1}, block * comm_.rank()));
    }
    return out;
  }

  std::unique_ptr<detail::BucketReduction<C>> choose_path(detail::GradientSharding sharding) {
    sharded_ = sharding.group != nullptr;
    rows_path_ = !sharded_ && !in_blocks_mode_;
    if constexpr (collective::ThreadGroupCollective<C>) {
      if (sharded_) return std::make_unique<detail::ShardedReduction<C>>(comm_, std::move(sharding), buckets_);
      return std::make_unique<detail::ReplicaThreadReduction<C>>(comm_);
    } else {
      STRATA_CHECK(!sharded_, "GradientLayout::sharded needs replicas that are threads of one process; ", C::name,
                   " ranks are processes");
      if (scatter_) {
        using Where = typename detail::ScatterReduction<C>::Where;
        const Where where = sharding.async ? Where::collective_async
                            : detail::shared_buckets_reduce_on_replica_thread(comm_.size()) ? Where::replica_thread
                                                                                            : Where::comm_thread;
        return std::make_unique<detail::ScatterReduction<C>>(comm_, buckets_, block_sums_, where);
      }
      if constexpr (collective::DeviceCollective<C>)
        if (buckets_.size() > 0 && buckets_[0].buffer.device().kind != DeviceKind::cpu)
          return std::make_unique<detail::DeviceStreamReduction<C>>(comm_);
      // (ShardedStrategy's buckets in blocks, each rank's own memory, follow the same rule)
      if ((buckets_.all_shared() || in_blocks_mode_) && detail::shared_buckets_reduce_on_replica_thread(comm_.size()))
        return std::make_unique<detail::ReplicaThreadReduction<C>>(comm_);
      std::vector<std::size_t> counts;
      std::vector<DType> dtypes;
      for (const detail::GradientBucket& bk : buckets_) counts.push_back(bk.count), dtypes.push_back(bk.dtype);
      return std::make_unique<detail::CommThreadReduction<C>>(comm_, buckets_,
                                                              detail::WireCompressor<C>(compression_, counts, dtypes));
    }
  }

  // Whether parameter k is a table whose sum finish() makes by rows or dense.
  bool by_rows(std::size_t k) const noexcept { return rows_path_ && buckets_.plan().buckets()[buckets_.plan().slot(k).bucket].table; }

  // Starts the buckets not started yet (parameters that got no gradient in this pass: grad()
  // has left zeros, or the accumulation), waits for all, then sums the tables.
  void settle() {
    if (settled_) return;  // (a read of the gradients settled this step already)
    for (std::size_t k = 0; k < fired_.size(); ++k)
      if (!fired_[k]) {
        if (!by_rows(k)) buckets_.bind(k);
        mark(k);
      }
    launch_ready();
    const auto t0 = Clock::now();
    {
      const collective::detail::WaitTimer waiting;
      for (std::size_t b = 0; b < buckets_.size(); ++b) path_->wait(buckets_[b], b);
    }
    // The tables, in bucket order on every replica, each collective on this thread: the
    // communication thread is idle now, so the collectives keep one order on every rank.
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      if (rows_path_ && buckets_[b].table) aggregate_table(b);
    path_->settled();
    stats_.exposed_seconds += seconds_since(t0);
    settled_ = true;
  }

  // Table `b`'s sum across the replicas: its rows gathered where every replica holds rows and
  // the rule finds that fewer bytes; else its rows made dense in its bucket, all-reduced whole.
  void aggregate_table(std::size_t b) {
    detail::GradientBucket& bk = buckets_[b];
    const std::size_t k = bucket_members(b).front();
    const Tensor& p = buckets_.params()[k];
    if (detail::NonfiniteWatch::wanted())
      nonfinite_.note(k, p.has_row_grad() ? p.row_grad().rows : p.impl()->ag.grad);
    const std::int64_t width = p.dim(0) > 0 ? p.numel() / p.dim(0) : 0;
    const std::size_t es = size_of(p.dtype());
    const std::int64_t mine = p.has_row_grad() ? p.row_grad().indices.numel() : 0;
    stats_.table_touched_bytes += double(mine) * (8.0 + double(width) * double(es));
    detail::timed_reduction(bk, b, [&] {
      const detail::RowAggregation::Census c = rows_.census(comm_, p);
      if (c.all_rows && rule_.gathers(comm_.size(), c.most, p.dim(0), width, es)) {
        stats_.table_bytes_sent += double(rows_.gather(comm_, p, c));
        ++stats_.tables_gathered;
        return;
      }
      (void)p.grad();     // rows scattered into the gradient's buffer, the bucket slot
      buckets_.bind(k);   // (copied there if the gradient had moved)
      void* buf = bk.buffer.raw_data();
      comm_.allreduce_raw(buf, buf, bk.count, bk.dtype, ReduceOp::Sum);
      stats_.table_bytes_sent += double(bk.bytes());
      ++stats_.tables_dense;
    });
  }

  // Parameter k's gradient of this step is final; the first one begins the step.
  void mark(std::size_t k) {
    if (marked_++ == 0) {
      nonfinite_.reset();
      if (sharded_) step_.begin();
      in_blocks_ = scatter_;  // this step's sums will be in blocks
    }
    fired_[k] = true;
    --buckets_.of(k).pending;
  }

  // A hook: parameter k's gradient of this pass is final.
  void ready(std::size_t k) {
    if (!sync_) return;
    STRATA_CHECK(!fired_[k], "the gradient of parameter ", k, " became final twice before apply_gradients: two "
                 "backward passes in one step need NoSync for all but the last (gradient accumulation)");
    buckets_.bind(k);  // a no-op unless something replaced the gradient tensor
    mark(k);
    launch_ready();
  }

  // Starts the buckets that are complete, in index order (passing the tables: finish() sums them).
  void launch_ready() {
    while (next_ < buckets_.size() && (buckets_[next_].pending == 0 || (rows_path_ && buckets_[next_].table))) {
      const std::size_t b = next_++;
      detail::GradientBucket& bk = buckets_[b];
      if (rows_path_ && bk.table) continue;
      if (detail::NonfiniteWatch::wanted()) nonfinite_.note(buckets_.params(), bucket_members(b));
      const bool in_shares = path_->start(bk, b);
      if (path_->on_replica_thread()) stats_.exposed_seconds += bk.seconds;
      step_.decided(in_shares);
    }
    release_reduced();
  }

  // Whether bucket b gives its memory back after its reduction (GradientSharding::release; a
  // wrap unit's bucket is its ShardedModel's to give back).
  bool releases(std::size_t b) const noexcept {
    return release_ && buckets_.plan().buckets()[b].unit < 0 && !buckets_[b].table;
  }
  // The buckets whose reduction has completed give their memory back, in start order.
  void release_reduced() {
    if (!release_) return;
    for (; released_ < next_ && path_->test(buckets_[released_], released_); ++released_)
      if (releases(released_)) buckets_.release(released_);
  }

  C& comm_;
  Compression compression_;
  bool sharded_ = false;  // made with a GradientSharding (set by choose_path)
  bool in_blocks_mode_ = false;  // buckets in blocks, one per rank (GradientSharding::blocks)
  bool scatter_ = false;         // ... reduce-scattered into them (GradientSharding::scatter)
  bool release_ = false;         // ... each bucket's memory given back after (GradientSharding::release)
  bool in_blocks_ = false;       // this step's sums are in blocks only (scatter_), not gathered
  bool rows_path_ = false;  // tables summed by RowAggregation (whole gradients; set by choose_path)
  detail::GradientBuckets buckets_;
  std::vector<Tensor> block_sums_;  // in blocks: this rank's block of each bucket's sum
  std::unique_ptr<detail::BucketReduction<C>> path_;
  std::vector<bool> fired_;     // per parameter: its gradient of this step is final
  std::size_t marked_ = 0;      // parameters final in this step
  std::size_t next_ = 0;        // the next bucket to start
  std::size_t released_ = 0;    // buckets of this step past release_reduced()
  bool settled_ = false;        // this step's buckets all started and done (settle), until finish()
  // Only replicas that are threads can shard their sums; processes' engines carry no step state.
  [[no_unique_address]] std::conditional_t<collective::ThreadGroupCollective<C>, detail::ShardedStep, detail::WholeStep> step_;
  bool sync_ = true;
  detail::NonfiniteWatch nonfinite_;
  detail::RowAggregationRule rule_ = detail::RowAggregationRule::from_env();
  detail::RowAggregation rows_;
  std::shared_ptr<HookState> hooks_;
  GradientStats stats_;
};

}  // namespace strata

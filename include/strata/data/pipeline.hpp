/// \file
/// Pipeline: a TensorDataset seen through seeded shuffling, sharding and batching, iterated
/// one epoch per range-for. Each new iteration is the next epoch, reshuffled with a seed
/// derived from (seed, epoch), so runs with the same seed see the same order. prefetch(k)
/// assembles up to k batches ahead on a background thread, so the step never waits for data.
///
/// @code
/// auto train = strata::data::Pipeline(strata::data::fashion_mnist_train()).shuffle(0).batch(64).prefetch(2);
/// for (int epoch = 0; epoch < 3; ++epoch)
///   for (const strata::data::Batch& b : train) step(b.x, b.y);
/// @endcode
#pragma once

#include <algorithm>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>  // std::iota
#include <span>
#include <thread>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/tensor/random.hpp>

namespace strata::data {

/// Runs fn(ctx, lo, hi) over balanced parts [lo, hi) of [0, n) on several threads at once and
/// returns when all are done: how a strategy whose replica threads wait between steps lends
/// them to the assembly of the next batch.
class RowParallelism {
 public:
  virtual ~RowParallelism() = default;
  virtual void run(std::int64_t n, void (*fn)(void* ctx, std::int64_t lo, std::int64_t hi), void* ctx) = 0;
};

/// What becomes of an epoch's last, partial batch.
enum class Remainder { keep, drop, pad };

/// One example as a per-example map (Pipeline::map) sees it: views of its rows in the batch
/// being assembled, to change in place (the dataset itself is never changed), where it comes
/// from, and a seed of its own for random augmentation.
struct Example {
  Tensor x, y;                      ///< its first input and its label (undefined without labels)
  std::vector<Tensor> more_inputs;  ///< its other inputs (input(i))
  std::int64_t index = 0;           ///< its index in the dataset
  std::int64_t epoch = 0;
  /// From (the map's seed, epoch, index): the same for this example whatever the batch size,
  /// the split across replicas and workers, or where a run resumed.
  std::uint64_t seed = 0;

  const Tensor& input(std::size_t i) const {
    STRATA_CHECK(i <= more_inputs.size(), "Example::input(", i, "): the dataset has ", 1 + more_inputs.size(),
                 " input(s)");
    return i == 0 ? x : more_inputs[i - 1];
  }
};

/// A per-example function and the seed its examples' seeds derive from.
struct ExampleMap {
  std::function<void(Example&)> fn;
  std::uint64_t seed = 0;
};

/// How one epoch is laid out: which examples, in which order, in batches of what size.
struct PipelineOptions {
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::int64_t batch_size = 1;
  bool drop_remainder = false;
  bool pad_remainder = false;  ///< the last batch padded to batch_size rows (Remainder::pad)
  std::int64_t num_shards = 1, shard_index = 0;
  std::int64_t num_splits = 1, split_index = 0;  ///< this worker's rows of every global batch
  int prefetch = 0;
  std::int64_t take_batches = -1;  ///< at most this many batches per epoch (-1: all)
  std::int64_t first_batch = 0;    ///< the next epoch starts here (set_position: a resume); then 0
  std::shared_ptr<RowParallelism> parallel;  ///< copies a batch's rows on several threads (null: one)
  std::vector<std::shared_ptr<const ExampleMap>> maps;  ///< applied in order to each example of a batch
};

namespace detail {

/// The example order of epoch `epoch`: a seeded Fisher-Yates permutation (or the identity),
/// then every num_shards-th element starting at shard_index.
inline std::vector<std::int64_t> epoch_order(std::int64_t n, const PipelineOptions& o, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (o.shuffle) {
    Generator gen(Generator::derive(o.seed, static_cast<std::uint64_t>(epoch)));
    for (std::int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(i + 1)));
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
  }
  if (o.num_shards > 1) {
    std::vector<std::int64_t> mine;
    mine.reserve(static_cast<std::size_t>(n / o.num_shards + 1));
    for (std::int64_t i = o.shard_index; i < n; i += o.num_shards) mine.push_back(order[static_cast<std::size_t>(i)]);
    order = std::move(mine);
  }
  return order;
}

/// The first row of part `i` when `count` rows are split into `n` balanced, contiguous parts
/// (the first count % n parts get one row more).
inline std::int64_t split_begin(std::int64_t count, std::int64_t i, std::int64_t n) noexcept {
  return i * (count / n) + std::min(i, count % n);
}

/// Copies rows idx[lo..hi) of `from` (rows of `row` bytes) to rows lo..hi of `to`.
inline void copy_rows(const char* from, char* to, std::size_t row, const std::int64_t* idx, std::int64_t lo,
                      std::int64_t hi) {
  // Rows lie anywhere in a dataset far larger than the caches: the copy waits on memory, so
  // ask for the rows a few ahead while copying this one (several misses in flight, not one).
  constexpr std::int64_t kAhead = 4;
  auto prefetch_row = [&](std::int64_t i) {
    const char* r = from + static_cast<std::size_t>(idx[i]) * row;
    for (std::size_t b = 0; b < row; b += 64) __builtin_prefetch(r + b);
  };
  for (std::int64_t i = lo; i < std::min(lo + kAhead, hi); ++i) prefetch_row(i);
  for (std::int64_t i = lo; i < hi; ++i) {
    if (i + kAhead < hi) prefetch_row(i + kAhead);
    std::memcpy(to + static_cast<std::size_t>(i) * row, from + static_cast<std::size_t>(idx[i]) * row, row);
  }
}

/// Copies rows `idx` of `src` ([N, ...], contiguous) into a new tensor [rows, ...] (rows past
/// `count` filled with `fill_byte`), on the threads of `parallel` when given and worth it.
inline Tensor gather_rows(const Tensor& src, const std::int64_t* idx, std::int64_t count, std::int64_t rows = -1,
                          int fill_byte = 0, RowParallelism* parallel = nullptr) {
  if (rows < 0) rows = count;
  Shape s = src.shape();
  s[0] = rows;
  Tensor out = Tensor::empty(s, src.dtype());
  const std::size_t row = src.dim(0) == 0 ? 0 : src.nbytes() / static_cast<std::size_t>(src.dim(0));
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  constexpr std::size_t kParallelBytes = std::size_t{64} << 10;  // below this, a hand-off costs more than it saves
  if (parallel && static_cast<std::size_t>(count) * row >= kParallelBytes) {
    struct Job {
      const char* from;
      char* to;
      std::size_t row;
      const std::int64_t* idx;
    } job{from, to, row, idx};
    parallel->run(count, [](void* j, std::int64_t lo, std::int64_t hi) {
      const auto& b = *static_cast<const Job*>(j);
      copy_rows(b.from, b.to, b.row, b.idx, lo, hi);
    }, &job);
  } else {
    copy_rows(from, to, row, idx, 0, count);
  }
  if (rows > count)  // padding rows after the examples
    std::memset(to + static_cast<std::size_t>(count) * row, fill_byte, static_cast<std::size_t>(rows - count) * row);
  return out;
}

/// Row `r` of `t` [N, ...] as a view of shape [...].
inline Tensor row_view(const Tensor& t, std::int64_t r) {
  const Shape& s = t.shape();
  const Shape row_shape(std::span<const std::int64_t>(s.begin() + 1, s.end()));
  const std::int64_t row = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  return ::strata::detail::make_view(t, row_shape, contiguous_strides(row_shape), t.impl()->offset() + r * row);
}

/// One epoch in flight: the order, and (with prefetch) the producer thread and its ring.
class EpochState {
 public:
  EpochState(std::shared_ptr<const TensorDataset> ds, const PipelineOptions& o, std::int64_t epoch)
      : ds_(std::move(ds)), o_(o), epoch_(epoch), order_(epoch_order(ds_->size(), o, epoch)) {
    const auto n = static_cast<std::int64_t>(order_.size());
    num_batches_ = o.drop_remainder ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
    if (o.take_batches >= 0 && o.take_batches < num_batches_) num_batches_ = o.take_batches;
    consumed_ = std::clamp<std::int64_t>(o.first_batch, 0, num_batches_);
    if (o.prefetch > 0) {
      ring_.resize(static_cast<std::size_t>(o.prefetch));
      producer_ = std::thread([this, first = consumed_] { produce(first); });
    }
  }
  ~EpochState() {
    if (producer_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      producer_.join();
    }
  }
  EpochState(const EpochState&) = delete;
  EpochState& operator=(const EpochState&) = delete;

  /// The next batch into `out`; false at the end of the epoch.
  bool next(Batch& out) {
    if (consumed_ >= num_batches_) return false;
    if (!producer_.joinable()) {
      out = make(consumed_++);
      return true;
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return count_ > 0 || error_; });
    if (error_) std::rethrow_exception(error_);
    out = std::move(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    ++consumed_;
    lock.unlock();
    cv_.notify_all();
    return true;
  }

  std::int64_t num_batches() const noexcept { return num_batches_; }

  /// Batch k of this epoch, assembled now on the calling thread (random access).
  Batch make(std::int64_t k) const {
    STRATA_CHECK(k >= 0 && k < num_batches_, "batch ", k, " of an epoch of ", num_batches_, " batches");
    const std::int64_t start = k * o_.batch_size;
    const std::int64_t count = std::min<std::int64_t>(o_.batch_size, static_cast<std::int64_t>(order_.size()) - start);
    // Padded, a partial batch keeps the full batch's rows: the examples, then padding rows.
    const std::int64_t rows = o_.pad_remainder ? o_.batch_size : count;
    const std::int64_t lo = split_begin(rows, o_.split_index, o_.num_splits);
    const std::int64_t hi = split_begin(rows, o_.split_index + 1, o_.num_splits);
    const std::int64_t real = std::max<std::int64_t>(0, std::min(hi, count) - lo);
    const std::int64_t* idx = order_.data() + start + lo;
    Batch b;
    b.x = gather_rows(ds_->x, idx, real, hi - lo, 0, o_.parallel.get());
    if (ds_->y.defined()) b.y = gather_rows(ds_->y, idx, real, hi - lo, 0xFF, o_.parallel.get());  // -1: kPadLabel
    for (const Tensor& in : ds_->more_inputs) b.more_inputs.push_back(gather_rows(in, idx, real, hi - lo, 0, o_.parallel.get()));
    b.size = hi - lo;
    b.padding = hi - lo - real;
    b.global_size = count;
    b.epoch = epoch_;
    b.index = k;
    b.global_offset = lo;
    if (!o_.maps.empty()) apply_maps(b, idx, real);
    return b;
  }

 private:
  // Each map on each real row of `b` (padding rows are not examples), in place.
  void apply_maps(Batch& b, const std::int64_t* idx, std::int64_t real) const {
    Example e;
    e.more_inputs.resize(b.more_inputs.size());
    e.epoch = epoch_;
    for (std::int64_t r = 0; r < real; ++r) {
      e.x = row_view(b.x, r);
      e.y = b.y.defined() ? row_view(b.y, r) : Tensor();
      for (std::size_t i = 0; i < b.more_inputs.size(); ++i) e.more_inputs[i] = row_view(b.more_inputs[i], r);
      e.index = idx[r];
      for (const auto& m : o_.maps) {
        e.seed = Generator::derive(Generator::derive(m->seed, static_cast<std::uint64_t>(epoch_)),
                                   static_cast<std::uint64_t>(e.index));
        m->fn(e);
      }
    }
  }
  void produce(std::int64_t first) {
    try {
      for (std::int64_t k = first; k < num_batches_; ++k) {
        // Wait for a free slot before assembling the batch, so that at most ring size + 1
        // batches (the consumer's) are ever alive: the allocator reaches that peak in the
        // first steps, and the steady state allocates nothing however the threads interleave.
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [&] { return count_ < ring_.size() || stop_; });
          if (stop_) return;
        }
        Batch b = make(k);  // only this thread adds to the ring: the slot stays free
        std::unique_lock lock(mu_);
        if (stop_) return;
        ring_[(head_ + count_) % ring_.size()] = std::move(b);
        ++count_;
        lock.unlock();
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  std::shared_ptr<const TensorDataset> ds_;
  PipelineOptions o_;
  std::int64_t epoch_;
  std::vector<std::int64_t> order_;
  std::int64_t num_batches_ = 0, consumed_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Batch> ring_;
  std::size_t head_ = 0, count_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread producer_;
};

}  // namespace detail

/// A dataset with its epoch layout. Copies share the examples; options are per copy.
class Pipeline {
 public:
  Pipeline() = default;
  explicit Pipeline(TensorDataset ds) : ds_(std::make_shared<const TensorDataset>(std::move(ds))) {}

  /// Reshuffles every epoch from a seed derived from (seed, epoch).
  Pipeline shuffle(std::uint64_t seed) const {
    Pipeline p = *this;
    p.o_.shuffle = true;
    p.o_.seed = seed;
    return p;
  }
  /// Groups examples into batches of `size`; the last, partial batch is kept unless dropped.
  Pipeline batch(std::int64_t size, bool drop_remainder = false) const {
    return batch(size, drop_remainder ? Remainder::drop : Remainder::keep);
  }
  /// Groups examples into batches of `size`; the last, partial batch is kept (smaller),
  /// dropped, or padded to `size` rows: zero inputs labelled kPadLabel (-1), which the losses
  /// skip, so every replica's share has a fixed shape (needs integer labels).
  Pipeline batch(std::int64_t size, Remainder remainder) const {
    STRATA_CHECK(size > 0, "batch size must be positive, got ", size);
    if (remainder == Remainder::pad && ds_)
      STRATA_CHECK(ds_->y.defined() && (ds_->y.dtype() == DType::i64 || ds_->y.dtype() == DType::i32),
                   "batch(", size, ", Remainder::pad) needs integer class labels (padding rows are labelled -1), got ",
                   ds_->y.defined() ? name_of(ds_->y.dtype()) : "no labels");
    Pipeline p = *this;
    p.o_.batch_size = size;
    p.o_.drop_remainder = remainder == Remainder::drop;
    p.o_.pad_remainder = remainder == Remainder::pad;
    return p;
  }
  /// Keeps every num_shards-th example (after shuffling) starting at `index`: one worker's share.
  Pipeline shard(std::int64_t num_shards, std::int64_t index) const {
    STRATA_CHECK(num_shards >= 1 && index >= 0 && index < num_shards, "shard(", num_shards, ", ", index,
                 "): need 0 <= index < num_shards");
    Pipeline p = *this;
    p.o_.num_shards = num_shards;
    p.o_.shard_index = index;
    return p;
  }
  /// Keeps part `index` of `num_parts` balanced, contiguous parts of every batch: one worker's
  /// rows of each global batch. Every worker steps through the same number of batches, and
  /// Batch::global_size stays the whole batch's size (what losses are scaled by).
  Pipeline split(std::int64_t num_parts, std::int64_t index) const {
    STRATA_CHECK(num_parts >= 1 && index >= 0 && index < num_parts, "split(", num_parts, ", ", index,
                 "): need 0 <= index < num_parts");
    Pipeline p = *this;
    p.o_.num_splits = num_parts;
    p.o_.split_index = index;
    return p;
  }
  /// Assembles up to `depth` batches ahead on a background thread (0: on the caller's thread).
  Pipeline prefetch(int depth = 2) const {
    STRATA_CHECK(depth >= 0, "prefetch depth must be non-negative, got ", depth);
    Pipeline p = *this;
    p.o_.prefetch = depth;
    return p;
  }
  /// Applies `fn(Example&)` to each example of every batch as the batch is assembled (on the
  /// prefetch thread, when there is one), after the maps given before: it changes the
  /// example's rows in the batch in place (normalise, augment), never the dataset, and may
  /// draw randomness from `Example::seed`, which depends on `seed`, the epoch and the
  /// example's index only, so a resumed or differently split run maps every example alike.
  Pipeline map(std::function<void(Example&)> fn, std::uint64_t seed = 0) const {
    STRATA_CHECK(static_cast<bool>(fn), "Pipeline::map: an empty function");
    Pipeline p = *this;
    p.o_.maps.push_back(std::make_shared<const ExampleMap>(ExampleMap{std::move(fn), seed}));
    return p;
  }
  /// Copies each batch's rows on the threads of `parallel` (null: on the iterating thread).
  Pipeline parallel_rows(std::shared_ptr<RowParallelism> parallel) const {
    Pipeline p = *this;
    p.o_.parallel = std::move(parallel);
    return p;
  }
  /// At most `batches` batches per epoch.
  Pipeline take(std::int64_t batches) const {
    STRATA_CHECK(batches >= 0, "take(", batches, "): must be non-negative");
    Pipeline p = *this;
    p.o_.take_batches = batches;
    return p;
  }

  /// The epoch the next iteration will produce (each iteration advances it).
  std::int64_t epoch() const noexcept { return next_epoch_; }
  /// The next iteration yields epoch `epoch` from its batch `batch` on (the same order and
  /// batches the uninterrupted run had there): how a restored checkpoint resumes mid-epoch.
  void set_position(std::int64_t epoch, std::int64_t batch) {
    STRATA_CHECK(epoch >= 0 && batch >= 0, "set_position(", epoch, ", ", batch, "): needs non-negative values");
    next_epoch_ = epoch;
    o_.first_batch = batch;
  }
  /// Sets the next epoch, e.g. to resume.
  void set_epoch(std::int64_t e) {
    STRATA_CHECK(e >= 0, "epoch must be non-negative, got ", e);
    next_epoch_ = e;
  }
  const PipelineOptions& options() const noexcept { return o_; }
  const TensorDataset& dataset() const { return *ds_; }

  /// Examples per epoch in this shard.
  std::int64_t size() const noexcept {
    const std::int64_t n = ds_ ? ds_->size() : 0;
    return o_.shard_index < n ? (n - o_.shard_index + o_.num_shards - 1) / o_.num_shards : 0;
  }
  /// Batches per epoch.
  std::int64_t num_batches() const noexcept {
    const std::int64_t n = size();
    std::int64_t b = o_.drop_remainder ? n / o_.batch_size : (n + o_.batch_size - 1) / o_.batch_size;
    if (o_.take_batches >= 0 && o_.take_batches < b) b = o_.take_batches;
    return b;
  }

  struct Sentinel {};
  /// Walks one epoch's batches.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<detail::EpochState> st) : st_(std::move(st)) { ++*this; }
    const Batch& operator*() const noexcept { return cur_; }
    const Batch* operator->() const noexcept { return &cur_; }
    Iterator& operator++() {
      if (st_ && !st_->next(cur_)) st_.reset();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& it, Sentinel) noexcept { return !it.st_; }

   private:
    std::shared_ptr<detail::EpochState> st_;
    Batch cur_;
  };

  /// The next epoch's batches in any order, each assembled when asked for (batch(k)): how
  /// a strategy that hands batches out one at a time reads them (ParameterServerStrategy's
  /// dispatched batches). Advances the epoch as begin() does.
  class Batches {
   public:
    explicit Batches(std::shared_ptr<const detail::EpochState> st) : st_(std::move(st)) {}
    std::int64_t num_batches() const noexcept { return st_->num_batches(); }
    Batch batch(std::int64_t k) const { return st_->make(k); }

   private:
    std::shared_ptr<const detail::EpochState> st_;
  };
  Batches begin_batches() {
    STRATA_CHECK(ds_ != nullptr, "iterating an empty Pipeline");
    PipelineOptions o = o_;
    o.prefetch = 0;     // assembled on request
    o.first_batch = 0;  // every batch can be asked for
    auto st = std::make_shared<const detail::EpochState>(ds_, o, next_epoch_++);
    o_.first_batch = 0;
    return Batches(std::move(st));
  }

  /// Starts the next epoch.
  Iterator begin() {
    STRATA_CHECK(ds_ != nullptr, "iterating an empty Pipeline");
    auto st = std::make_shared<detail::EpochState>(ds_, o_, next_epoch_++);
    o_.first_batch = 0;  // a resume position applies once
    return Iterator(std::move(st));
  }
  Sentinel end() const noexcept { return {}; }

 private:
  std::shared_ptr<const TensorDataset> ds_;
  PipelineOptions o_;
  std::int64_t next_epoch_ = 0;
};

}  // namespace strata::data

/// \file
/// GradientBuckets: how a GradientEngine packs one replica's gradients into flat buffers.
///
/// The parameters go last first (the order backward finishes them) into buckets of about
/// `bucket_bytes`; a dtype change starts a new bucket, and a row-sparse table (one whose
/// gradient comes as rows, docs/design/sparse_tables.md) has a bucket of its own, which the engine
/// may sum by gathering rows instead (row_aggregation.hpp). Each parameter's gradient is a view of
/// its slot in its bucket's buffer, so backward writes it there and nothing is copied.
/// BucketPlan is the packing alone (no memory): the split update asks it for each replica's
/// share of the buckets before any engine exists.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <strata/collective/async.hpp>          // Work
#include <strata/collective/detail/reduce.hpp>  // share_begin
#include <strata/optim/optimizer.hpp>           // ElementRange
#include <strata/support/check.hpp>
#include <strata/tensor/factory.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// Where bucket packing puts every parameter: pure arithmetic over shapes and dtypes.
class BucketPlan {
 public:
  struct Slot {
    std::size_t bucket = 0, offset = 0;  ///< the bucket, and the element the parameter starts at
  };
  struct Bucket {
    DType dtype = DType::f32;
    std::vector<std::size_t> members;  ///< parameter indices, in packing order
    std::size_t count = 0, bytes = 0;
    bool table = false;  ///< one row-sparse table alone
    int unit = -1;       ///< the wrap unit whose parameters it holds, or -1
  };

  /// `blocks` > 1: each bucket padded (with zeros) to that many equal blocks of a multiple of
  /// 16 elements, one per rank (ShardedStrategy's layout: block_ranges). `units` (empty, or
  /// one entry per parameter): parameters of unit u >= 0 share one bucket of their own, however
  /// large (ShardedStrategy's wrap units); those of -1 are packed by size as usual.
  BucketPlan(const std::vector<Tensor>& params, std::size_t bucket_bytes, int blocks = 1, std::span<const int> units = {})
      : numel_(params.size()), slot_of_(params.size()), blocks_(blocks) {
    STRATA_CHECK(bucket_bytes > 0, "gradient bucket size must be positive");
    STRATA_CHECK(blocks >= 1, "gradient buckets in ", blocks, " blocks");
    STRATA_CHECK(units.empty() || units.size() == params.size(), "gradient buckets: ", units.size(), " units for ",
                 params.size(), " parameters");
    auto unit = [&](std::size_t k) { return units.empty() ? -1 : units[k]; };
    for (std::size_t k = params.size(); k-- > 0;) {
      const Tensor& p = params[k];
      STRATA_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "GradientEngine: parameter ", k,
                   " is not a leaf that requires gradients");
      STRATA_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, "GradientEngine: parameter ", k, " is ",
                   name_of(p.dtype()), "; gradients are all-reduced in float32 or float64");
      const bool table = is_table(p);
      if (buckets_.empty() || buckets_.back().dtype != p.dtype() || buckets_.back().unit != unit(k) ||
          (unit(k) < 0 && buckets_.back().bytes >= bucket_bytes) || table || buckets_.back().table) {
        buckets_.emplace_back().dtype = p.dtype();
        buckets_.back().table = table;
        buckets_.back().unit = unit(k);
      }
      Bucket& b = buckets_.back();
      slot_of_[k] = Slot{buckets_.size() - 1, b.count};
      numel_[k] = static_cast<std::size_t>(p.numel());
      b.members.push_back(k);
      b.count += numel_[k];
      b.bytes += p.nbytes();
    }
    if (blocks_ > 1)
      for (Bucket& b : buckets_) {
        const std::size_t n = static_cast<std::size_t>(blocks_);
        b.count = ((b.count + n - 1) / n + 15) / 16 * 16 * n;
        b.bytes = b.count * size_of(b.dtype);
      }
  }

  /// Whether `p` packs as a row-sparse table: marked so by a row-sparse lookup or an
  /// nn::Embedding made with TableGradient::row_sparse, in host memory, with rows.
  static bool is_table(const Tensor& p) noexcept {
    return p.impl()->ag.row_sparse && p.ndim() >= 1 && p.device().kind == DeviceKind::cpu;
  }

  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  /// Elements of bucket b in each of its blocks (its count where it has one block).
  std::size_t block(std::size_t b) const { return buckets_.at(b).count / static_cast<std::size_t>(blocks_); }
  int blocks() const noexcept { return blocks_; }
  /// For each parameter, the elements that fall in block `r` of its bucket (a contiguous run of
  /// it, empty where the block holds none of it): what rank r holds of it under ShardedStrategy.
  std::vector<optim::ElementRange> block_ranges(int r) const {
    std::vector<optim::ElementRange> out(slot_of_.size());
    for (std::size_t k = 0; k < slot_of_.size(); ++k) {
      const Slot s = slot_of_[k];
      const std::size_t lo = block(s.bucket) * static_cast<std::size_t>(r), hi = lo + block(s.bucket);
      const std::size_t a = std::clamp(lo, s.offset, s.offset + numel_[k]);
      const std::size_t e = std::clamp(hi, s.offset, s.offset + numel_[k]);
      out[k] = {static_cast<std::int64_t>(a - s.offset), static_cast<std::int64_t>(e - s.offset)};
    }
    return out;
  }
  Slot slot(std::size_t k) const { return slot_of_.at(k); }

  /// For each parameter, the elements replica `r` of `n` reduces when an InProcess group
  /// all-reduces the buckets (its share of each bucket): where it updates when the strategy
  /// splits the update, so the summed gradient it reads is the one it has just written.
  std::vector<optim::ElementRange> shares(int r, int n) const {
    std::vector<optim::ElementRange> out(slot_of_.size());
    for (std::size_t k = 0; k < slot_of_.size(); ++k) {
      const Slot s = slot_of_[k];
      const std::size_t count = buckets_[s.bucket].count, end = s.offset + numel_[k];
      const std::size_t lo = std::clamp(collective::detail::share_begin(count, r, n), s.offset, end);
      const std::size_t hi = std::clamp(collective::detail::share_begin(count, r + 1, n), s.offset, end);
      out[k] = {static_cast<std::int64_t>(lo - s.offset), static_cast<std::int64_t>(hi - s.offset)};
    }
    return out;
  }

 private:
  std::vector<std::size_t> numel_;
  std::vector<Slot> slot_of_;
  std::vector<Bucket> buckets_;
  int blocks_ = 1;
};

/// One bucket of a step: its buffer, how many of its gradients are still to come, and its
/// all-reduce in flight.
struct GradientBucket {
  DType dtype = DType::f32;
  std::size_t count = 0;     ///< elements
  std::size_t pending = 0;   ///< members whose gradient of this step is not final yet
  bool table = false;        ///< one row-sparse table alone (BucketPlan::Bucket::table)
  Tensor buffer;
  bool shared = false;       ///< `buffer` is in memory the ranks share
  collective::Work done;
  double seconds = 0;        ///< its all-reduce's duration in this step
  std::size_t bytes() const noexcept { return count * size_of(dtype); }
};

/// A plan's buckets with their buffers, and the parameters' gradients bound to them.
class GradientBuckets {
 public:
  /// A buffer for `count` elements of `dtype` on `device`; sets `shared` when the ranks share it.
  using MakeBuffer = std::function<Tensor(std::int64_t count, DType dtype, Device device, bool& shared)>;

  /// `lazy_units`: a wrap unit's bucket gives its memory back at once (its gradients view it
  /// unwritten); whoever takes it again fills it (ShardedStrategy's stage 3). `released`: so
  /// does every other bucket (a table's excepted), released (GradientSharding::release). Each
  /// as it is made, so that they are never all held at once.
  GradientBuckets(const std::vector<Tensor>& params, std::size_t bucket_bytes, const MakeBuffer& make, int blocks = 1,
                  std::span<const int> units = {}, bool lazy_units = false, bool released = false)
      : params_(params), plan_(params, bucket_bytes, blocks, units) {
    const Device device = params_.empty() ? Device::cpu() : params_.front().device();
    for (const Tensor& p : params_)
      STRATA_CHECK(p.device() == device, "GradientEngine: parameters on ", device, " and ", p.device(),
                   "; one replica's parameters share a device");
    for (const BucketPlan::Bucket& planned : plan_.buckets()) {
      GradientBucket& bk = buckets_.emplace_back();
      bk.dtype = planned.dtype;
      bk.count = planned.count;
      bk.table = planned.table;
      // On the parameters' device: the gradients are views of it, and a device collective
      // (Nccl) reduces it where it is.
      bk.buffer = make(static_cast<std::int64_t>(bk.count), bk.dtype, device, bk.shared);
      bk.pending = planned.members.size();
      if (lazy_units && planned.unit >= 0) {
        bk.buffer.impl()->storage()->give_memory_back();
        for (std::size_t k : planned.members) params_[k].impl()->ag.grad = view_of(k);
        continue;
      }
      if (released && planned.unit < 0 && !planned.table) {
        release(buckets_.size() - 1);
        for (std::size_t k : planned.members) params_[k].impl()->ag.grad = view_of(k);
        continue;
      }
      bk.buffer.fill_(0.0);
      for (std::size_t k : planned.members) bind(k);
    }
  }

  const BucketPlan& plan() const noexcept { return plan_; }
  const std::vector<Tensor>& params() const noexcept { return params_; }
  std::size_t size() const noexcept { return buckets_.size(); }
  GradientBucket& operator[](std::size_t b) noexcept { return buckets_[b]; }
  const GradientBucket& operator[](std::size_t b) const noexcept { return buckets_[b]; }
  auto begin() noexcept { return buckets_.begin(); }
  auto end() noexcept { return buckets_.end(); }
  /// The bucket parameter k's gradient lives in.
  GradientBucket& of(std::size_t k) noexcept { return buckets_[plan_.slot(k).bucket]; }
  /// Whether every buffer is in memory the ranks share.
  bool all_shared() const noexcept {
    return !buckets_.empty() && std::all_of(buckets_.begin(), buckets_.end(), [](const GradientBucket& b) { return b.shared; });
  }

  /// Makes parameter k's gradient the view of its bucket slot (copying what it held); a no-op
  /// unless something replaced the gradient tensor. A released bucket takes memory again
  /// first, zeros.
  void bind(std::size_t k) {
    const Tensor& p = params_[k];
    const BucketPlan::Slot s = plan_.slot(k);
    Tensor& buf = buckets_[s.bucket].buffer;
    if (!buf.impl()->storage()->holds_memory()) {
      buf.impl()->storage()->take_memory();
      buf.fill_(0.0);  // (the padding too: it is reduced with the rest)
    }
    auto& g = p.impl()->ag.grad;
    void* want = static_cast<char*>(buf.raw_data()) + s.offset * size_of(p.dtype());
    if (g.defined() && g.raw_data() == want) return;
    Tensor view = view_of(k);
    if (g.defined() && g.shape() == p.shape())
      view.copy_(g);
    else
      view.fill_(0.0);
    g = std::move(view);
  }

  /// Bucket b gives its memory back; its parameters' gradients stay its views, without memory:
  /// the first one a backward pass writes takes it again, zeroed (autograd's
  /// take_memory_back), or bind() does (GradientSharding::release).
  void release(std::size_t b) { buckets_[b].buffer.impl()->storage()->give_memory_back(); }

  /// Parameter k's slot of its bucket, shaped like it.
  Tensor view_of(std::size_t k) const {
    const Tensor& p = params_[k];
    return detail::make_view(buckets_[plan_.slot(k).bucket].buffer, p.shape(), contiguous_strides(p.shape()),
                             static_cast<std::int64_t>(plan_.slot(k).offset));
  }

  /// Every bucket counting down its members again, for the next step.
  void rearm() noexcept {
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      buckets_[b].pending = plan_.buckets()[b].members.size();
      buckets_[b].done = collective::Work();
    }
  }

 private:
  std::vector<Tensor> params_;
  BucketPlan plan_;
  std::vector<GradientBucket> buckets_;
};

}  // namespace strata::detail

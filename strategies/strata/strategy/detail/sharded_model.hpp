/// \file
/// ShardedModel<C>: one model's state under ShardedStrategy, on one rank. Its gradient engine
/// packs the parameters into buckets padded to one equal block per rank (BucketPlan's
/// blocks); the parameters themselves move into flat buffers of the same layout, so that
/// this rank's shard of every parameter in a bucket is one contiguous block. The optimizer
/// updates the shards (Optimizer::hold_shards: its state is the shards' size), each shard's
/// gradient a view of the engine's block of the sum; after the update every bucket's blocks
/// are all-gathered into every rank's buffer. docs/sharding.md.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <strata/optim/optimizer.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

template <class C>
class ShardedModel {
 public:
  /// Over `params` (a model's, equal on every rank already), on every rank alike (collective):
  /// `scatter` reduce-scatters the gradients into the blocks, else they are all-reduced whole.
  ShardedModel(C& comm, std::vector<Tensor> params, std::size_t bucket_bytes, bool scatter)
      : comm_(comm), params_(checked(std::move(params))) {
    GradientSharding blocks;
    blocks.blocks = comm.size();
    blocks.scatter = scatter;
    engine_ = std::make_unique<GradientEngine<C>>(comm, params_, bucket_bytes, Compression::none, std::move(blocks));
    const BucketPlan& plan = engine_->plan();
    const int me = comm.rank();
    ranges_ = plan.block_ranges(me);
    const std::vector<optim::ElementRange>& mine = ranges_;
    for (std::size_t b = 0; b < plan.buckets().size(); ++b) {
      const BucketPlan::Bucket& bk = plan.buckets()[b];
      flat_.push_back(Tensor::empty(Shape{static_cast<std::int64_t>(bk.count)}, bk.dtype).fill_(0.0));
      staging_.push_back(Tensor::empty(Shape{static_cast<std::int64_t>(plan.block(b))}, bk.dtype));
    }
    shards_.resize(params_.size());
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const Tensor& p = params_[k];
      const BucketPlan::Slot s = plan.slot(k);
      const Tensor& flat = flat_[s.bucket];
      const auto at = static_cast<std::int64_t>(s.offset);
      // The parameter's values into its slot of the flat buffer, which it then views.
      Tensor home = make_view(flat, p.shape(), contiguous_strides(p.shape()), at);
      std::memcpy(home.raw_data(), p.raw_data(), p.nbytes());
      p.impl()->share_storage_of(*home.impl());
      // This rank's shard of it, and the shard's gradient in the engine's block of the sum.
      const optim::ElementRange r = mine[k];
      const std::int64_t len = r.end - r.begin, block_at = static_cast<std::int64_t>(plan.block(s.bucket)) * me;
      shards_[k] = make_view(flat, Shape{len}, Shape{1}, at + r.begin);
      const Tensor& sum = engine_->block_sum(s.bucket);  // (make_view's offsets count from the storage's start)
      shards_[k].impl()->ag.grad =
          make_view(sum, Shape{len}, Shape{1}, sum.impl()->offset() + (len > 0 ? at + r.begin - block_at : 0));
      held_ += static_cast<std::size_t>(len);
    }
  }

  /// Whether `g` holds this model's gradients; whether `opt` updates this model's parameters.
  bool owns(const Gradients& g) const noexcept { return engine_->owns(g); }
  bool updates(const optim::Optimizer& opt) const noexcept { return of(opt.params()); }
  GradientEngine<C>& engine() noexcept { return *engine_; }
  /// This rank's shard of each parameter (empty where another rank holds all of it).
  const std::vector<Tensor>& shards() const noexcept { return shards_; }
  /// This rank's elements of each parameter (empty where another rank holds all of it).
  const std::vector<optim::ElementRange>& ranges() const noexcept { return ranges_; }
  /// Elements of the parameters this rank holds the shards of.
  std::size_t held_elements() const noexcept { return held_; }
  /// Whether these are the parameters of `list`.
  bool of(std::span<const Tensor> list) const noexcept { return Gradients{params_, nullptr}.of(list); }

  /// After an update of this rank's shards: every bucket's blocks all-gathered into every
  /// rank's flat buffer, so each holds the whole of every parameter again. Collective.
  void gather_parameters() {
    const int me = comm_.rank();
    for (std::size_t b = 0; b < flat_.size(); ++b) {
      const std::size_t block = static_cast<std::size_t>(staging_[b].numel()), es = size_of(flat_[b].dtype());
      std::memcpy(staging_[b].raw_data(), static_cast<const char*>(flat_[b].raw_data()) + block * es * me, block * es);
      comm_.allgather_raw(staging_[b].raw_data(), flat_[b].raw_data(), block, flat_[b].dtype());
    }
  }

 private:
  static std::vector<Tensor> checked(std::vector<Tensor> params) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      const Tensor& p = params[k];
      STRATA_CHECK(p.device().kind == DeviceKind::cpu && p.is_contiguous(), "ShardedStrategy: parameter ", k, " (",
                   p.shape(), ") is not a contiguous tensor in host memory");
      STRATA_CHECK(!BucketPlan::is_table(p), "ShardedStrategy: parameter ", k, " (", p.shape(),
                   ") is a row-sparse table, which cannot be sharded yet: make its Embedding with "
                   "TableGradient::dense, or use MultiWorkerMirroredStrategy");
    }
    return params;
  }

  C& comm_;
  std::vector<Tensor> params_;
  std::unique_ptr<GradientEngine<C>> engine_;
  std::vector<Tensor> flat_;     // per bucket: the parameters' values, laid out as its gradients
  std::vector<Tensor> staging_;  // per bucket: this rank's block, sent by the all-gather
  std::vector<optim::ElementRange> ranges_;  // per parameter: this rank's elements of it
  std::vector<Tensor> shards_;   // per parameter: those elements, viewing flat_
  std::size_t held_ = 0;
};

}  // namespace strata::detail

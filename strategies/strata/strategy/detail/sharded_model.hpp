/// \file
/// ShardedModel<C>: one model's state under ShardedStrategy, on one rank. Its gradient engine
/// packs the parameters into buckets padded to one equal block per rank (BucketPlan's
/// blocks); the parameters themselves move into flat buffers of the same layout, so that
/// this rank's shard of every parameter in a bucket is one contiguous block. The optimizer
/// updates the shards (Optimizer::hold_shards: its state is the shards' size), each shard's
/// gradient a view of the engine's block of the sum; after the update every bucket's blocks
/// are all-gathered into every rank's buffer.
///
/// With wrap units (stage 3), a unit's parameters have buckets of their own, and this rank's
/// block of each is the only copy kept between uses: the unit's flat buffer gives its memory
/// back after the unit's forward and after its backward, and takes it again, all-gathered
/// from the blocks, before them (the next unit's all-gather started as one begins); its
/// gradient bucket holds memory from its backward until its reduce-scatter has completed.
/// Where the ranks share this host's memory and the host has no core beyond one per rank,
/// the units' collectives run blocking on the replica's thread instead, through that memory,
/// and a unit is gathered where it is used (nothing to overlap it with). docs/sharding.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/capabilities.hpp>
#include <strata/nn/module.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/ops/backward_callback.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/strategy/detail/wrap_units.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

template <class C>
class ShardedModel {
 public:
  /// Over `params` (a model's, equal on every rank already), on every rank alike (collective):
  /// `scatter` reduce-scatters the gradients into the blocks, else they are all-reduced whole.
  /// `units` (stage 3): the wrap units of the model whose parameters these are; none: every
  /// parameter kept whole on every rank (stages 1 and 2).
  ShardedModel(C& comm, std::vector<Tensor> params, std::size_t bucket_bytes, bool scatter, WrapUnits units = {})
      : comm_(comm), params_(checked(comm, std::move(params))) {
    if (!units.modules.empty()) inline_ = gathers_inline(comm);
    GradientSharding blocks;
    blocks.blocks = comm.size();
    blocks.in_blocks = true;
    blocks.scatter = scatter;
    blocks.release = scatter;
    // The units' all-gathers and reduce-scatters in one call order; on a device, every
    // reduce-scatter through the collective's own queue, behind the backward kernels.
    blocks.async = (!units.modules.empty() && !inline_) || (scatter && on_device());
    blocks.units = units.of_param;
    engine_ = std::make_unique<GradientEngine<C>>(comm, params_, bucket_bytes, Compression::none, std::move(blocks));
    const BucketPlan& plan = engine_->plan();
    const int me = comm.rank();
    ranges_ = plan.block_ranges(me);
    const std::vector<optim::ElementRange>& mine = ranges_;
    shards_.resize(params_.size());
    // Bucket by bucket, so that a wrap unit's whole parameters are held once at a time: each
    // parameter's values move into its slot of the bucket's flat buffer, which it then views;
    // a unit's flat buffer and gradient bucket give their memory back once its block is kept.
    for (std::size_t b = 0; b < plan.buckets().size(); ++b) {
      const BucketPlan::Bucket& bk = plan.buckets()[b];
      const bool in_unit = bk.unit >= 0;
      const Tensor& flat =
          flat_.emplace_back(Tensor::empty(Shape{static_cast<std::int64_t>(bk.count)}, bk.dtype, device()).fill_(0.0));
      // A unit's block kept between uses; another bucket's block is its part of the flat buffer.
      const Tensor& staging = staging_.emplace_back(
          in_unit ? Tensor::empty(Shape{static_cast<std::int64_t>(plan.block(b))}, bk.dtype, device()) : Tensor());
      const std::int64_t block_at = static_cast<std::int64_t>(plan.block(b)) * me;
      for (std::size_t k : bk.members) {
        const Tensor& p = params_[k];
        const auto at = static_cast<std::int64_t>(plan.slot(k).offset);
        Tensor home = make_view(flat, p.shape(), contiguous_strides(p.shape()), at);
        home.copy_(p);
        p.impl()->share_storage_of(*home.impl());
        // This rank's shard of it (in a unit's bucket: of the block kept between uses), and
        // the shard's gradient in the engine's block of the sum.
        const optim::ElementRange r = mine[k];
        const std::int64_t len = r.end - r.begin, in_block = len > 0 ? at + r.begin - block_at : 0;
        shards_[k] = in_unit ? make_view(staging, Shape{len}, Shape{1}, in_block)
                             : make_view(flat, Shape{len}, Shape{1}, at + r.begin);
        const Tensor& sum = engine_->block_sum(b);  // (make_view's offsets count from the storage's start)
        shards_[k].impl()->ag.grad = make_view(sum, Shape{len}, Shape{1}, sum.impl()->offset() + in_block);
        held_ += static_cast<std::size_t>(len);
      }
      if (in_unit) {
        keep_block(b);
        flat.impl()->storage()->give_memory_back();
      }
    }
    if (!units.modules.empty()) make_units(std::move(units));
  }
  ~ShardedModel() {
    *self_ = nullptr;
    for (Unit& u : units_) {
      if (u.module && u.module->call_hook() == u.hook.get()) u.module->set_call_hook(nullptr);
      for (auto& w : u.gathering) w.wait();
    }
  }
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

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
  /// rank's flat buffer, so each holds the whole of every parameter again (a wrap unit's
  /// buckets excepted: their blocks are gathered where the unit is next used). Collective.
  void gather_parameters() {
    for (std::size_t b = 0; b < flat_.size(); ++b) {
      if (unit_of_bucket(b) < 0) allgather_block(b);
    }
  }

  // ---- wrap units (stage 3) ------------------------------------------------------------

  /// The wrap units' names, in the order of WrapUnits::modules.
  std::vector<std::string> unit_names() const {
    std::vector<std::string> out;
    for (const Unit& u : units_) out.push_back(u.name);
    return out;
  }
  /// Bytes of host memory the wrap units' parameters and gradient buckets hold now (what stage 3
  /// gives back between uses).
  std::size_t unit_bytes_held() const {
    std::size_t bytes = 0;
    for (const Unit& u : units_)
      for (std::size_t b : u.buckets) {
        if (flat_[b].impl()->storage()->holds_memory()) bytes += flat_[b].nbytes();
        const Tensor& g = engine_->bucket_buffer(b);
        if (g.impl()->storage()->holds_memory()) bytes += g.nbytes();
      }
    return bytes;
  }

  /// Bytes of host memory the gradient buckets hold now (stages 2 and 3: none between steps,
  /// each bucket's memory given back after its reduce-scatter; stage 1 all of them).
  std::size_t gradient_bytes_held() const {
    std::size_t bytes = 0;
    for (std::size_t b = 0; b < engine_->num_buckets(); ++b) {
      const Tensor& g = engine_->bucket_buffer(b);
      if (g.impl()->storage()->holds_memory()) bytes += g.nbytes();
    }
    return bytes;
  }

  /// Before apply_gradients' aggregation: the buckets of units whose backward did not run this
  /// step take memory (zeros: no gradient), so the engine can reduce them; then every bucket
  /// reduced, and the units' gradient buckets give their memory back.
  void finish_gradients() {
    for (Unit& u : units_)
      if (!u.backward_ran) take_gradients(u);
    engine_->finish();
    for (Unit& u : units_) {
      give_back_gradients(u);
      u.backward_ran = false;
      release(u);  // (a unit gathered for a backward that did not reach it)
    }
    order_complete_ = true;
  }
  /// Waits for the all-gathers in flight: a collective the replica issues itself follows them.
  void quiesce() {
    for (Unit& u : units_) wait(u);
  }
  /// The end of a step or a pass: nothing in flight, every unit's parameters given back.
  void settle_units() {
    for (Unit& u : units_) release(u);
  }
  /// Every unit's parameters whole on this rank (collective), until release_all().
  void gather_all() {
    for (Unit& u : units_) start_gather(u);
    for (Unit& u : units_) wait(u);
    whole_ = true;  // until release_all: the hooks give nothing back (a forward on one rank alone gathers nothing)
  }
  /// Every unit's parameters whole on this rank for good and its module unhooked: the model
  /// outlives this state as a plain one (collective). No step of it may run here after.
  void detach() {
    gather_all();
    for (Unit& u : units_) {
      if (u.module && u.module->call_hook() == u.hook.get()) u.module->set_call_hook(nullptr);
      u.module = nullptr;
    }
  }
  /// Each unit keeps this rank's block of what its parameters hold now (written while
  /// gathered: a restore), then gives their memory back.
  void release_all() {
    whole_ = false;
    for (Unit& u : units_) {
      wait(u);
      if (u.state == Unit::State::gathered)
        for (std::size_t b : u.buckets) keep_block(b);
      release(u);
    }
  }

 private:
  struct Unit;
  // The hook a unit's module calls around its forward, and the backward callback at its output.
  class UnitHook final : public nn::Module::CallHook, public autograd::BackwardCallback {
   public:
    UnitHook(ShardedModel& m, std::size_t u) : m_(m), u_(u) {}
    void before(nn::Module&) override { m_.before_forward(u_); }
    Tensor after(nn::Module&, Tensor out) override { return m_.after_forward(u_, std::move(out)); }
    void on_backward() override { m_.before_backward(u_); }
    void moved(nn::Module* to) noexcept override { m_.units_[u_].module = to; }  // (null: the model is gone)

   private:
    ShardedModel& m_;
    std::size_t u_;
  };
  using GatherWork = decltype(std::declval<C&>().iallgather(std::span<const float>{}, std::span<float>{}));
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;
    std::unique_ptr<UnitHook> hook;
    std::vector<std::size_t> buckets;
    std::size_t params = 0;        // its parameters
    std::size_t final_params = 0;  // of which this backward pass has finished the gradients
    enum class State { released, gathering, gathered } state = State::gathered;
    std::vector<GatherWork> gathering;
    bool backward_ran = false;  // this step
  };

  // Whether stage 3's collectives run on the replica's thread, each blocking, a unit gathered
  // where it is used (no prefetch): where the ranks share this host's memory (the collectives
  // go through it) and the host has no core beyond one per rank, so there is none to overlap
  // them on (shared_buckets_reduce_on_replica_thread). Collective.
  static bool gathers_inline(C& comm) {
    if constexpr (collective::HostSharedMemory<C>)
      return comm.shares_host() && shared_buckets_reduce_on_replica_thread(comm.size());
    else
      return false;
  }

  int unit_of_bucket(std::size_t b) const { return engine_->plan().buckets()[b].unit; }
  // This rank's block of a unit's bucket b copied from its flat buffer into staging_[b] (what
  // the all-gather sends; the unit's only copy between uses).
  void keep_block(std::size_t b) {
    const std::int64_t block = staging_[b].numel();
    staging_[b].copy_(make_view(flat_[b], Shape{block}, Shape{1}, block * comm_.rank()));
  }

  // Every rank's block of bucket b gathered into its flat buffer (blocking): a unit's sent from
  // its kept block, another bucket's in place (this rank's block of the buffer is what it sends:
  // no copy of it is kept, RawCollective's in-place allgather_raw).
  void allgather_block(std::size_t b) {
    const std::size_t block = engine_->plan().block(b), bytes = block * size_of(flat_[b].dtype());
    const void* in = staging_[b].defined()
                         ? staging_[b].raw_data()
                         : static_cast<const char*>(flat_[b].raw_data()) + bytes * static_cast<std::size_t>(comm_.rank());
    comm_.allgather_raw(in, flat_[b].raw_data(), block, flat_[b].dtype());
  }

  void make_units(WrapUnits w) {
    units_.resize(w.modules.size());
    for (std::size_t j = 0; j < units_.size(); ++j) {
      Unit& u = units_[j];
      u.name = w.modules[j].first;
      u.module = w.modules[j].second;
      u.hook = std::make_unique<UnitHook>(*this, j);
      STRATA_REQUIRE(u.module->call_hook() == nullptr, invalid_argument, "strata.strategy", "ShardedStrategy: module '",
                     u.name, "' is a wrap unit of another model made in this strategy's scope already");
      u.module->set_call_hook(u.hook.get());
    }
    const BucketPlan& plan = engine_->plan();
    for (std::size_t b = 0; b < plan.buckets().size(); ++b)
      if (plan.buckets()[b].unit >= 0) units_[static_cast<std::size_t>(plan.buckets()[b].unit)].buckets.push_back(b);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const int j = w.of_param[k];
      if (j < 0) continue;
      ++units_[static_cast<std::size_t>(j)].params;
      // After the engine's own hook (which starts the bucket's reduce-scatter): once backward
      // has finished every gradient of the unit, its parameters are read no more this pass.
      Tensor(params_[k]).register_hook([self = self_, j](const Tensor&) {
        ShardedModel* m = *self;
        if (m == nullptr) return;  // (a model trained on after its strategy)
        Unit& u = m->units_[static_cast<std::size_t>(j)];
        if (++u.final_params == u.params) m->release(u);
      });
    }
    // This rank's blocks are the units' values from now on (the constructor gave the flat
    // buffers and the gradient buckets back): each unit is gathered at its first use.
    for (Unit& u : units_) u.state = Unit::State::released;
  }

  void start_gather(Unit& u) {
    if (u.state != Unit::State::released) return;
    observe::ScopedEvent ev(inline_ ? "allgather" : "iallgather", "communication",
                            static_cast<std::int64_t>(&u - units_.data()), static_cast<std::int64_t>(unit_bytes(u)));
    u.gathering.clear();
    for (std::size_t b : u.buckets) {
      flat_[b].impl()->storage()->take_memory();
      if (inline_) {
        allgather_block(b);
        continue;
      }
      const auto block = static_cast<std::size_t>(staging_[b].numel()), all = static_cast<std::size_t>(flat_[b].numel());
      if (flat_[b].dtype() == DType::f64)
        u.gathering.push_back(comm_.iallgather(std::span<const double>(staging_[b].template device_data<double>(), block),
                                               std::span<double>(flat_[b].template device_data<double>(), all)));
      else
        u.gathering.push_back(comm_.iallgather(std::span<const float>(staging_[b].template device_data<float>(), block),
                                               std::span<float>(flat_[b].template device_data<float>(), all)));
    }
    u.state = inline_ ? Unit::State::gathered : Unit::State::gathering;
  }
  void wait(Unit& u) {
    if (u.state != Unit::State::gathering) return;
    // (on the timeline: the part of the unit's all-gather that compute did not hide)
    observe::ScopedEvent ev("allgather_wait", "communication", static_cast<std::int64_t>(&u - units_.data()),
                            static_cast<std::int64_t>(unit_bytes(u)));
    for (auto& w : u.gathering) w.wait();
    u.gathering.clear();
    u.state = Unit::State::gathered;
  }
  std::size_t unit_bytes(const Unit& u) const {
    std::size_t bytes = 0;
    for (std::size_t b : u.buckets) bytes += flat_[b].nbytes();
    return bytes;
  }
  void gathered(Unit& u) {
    start_gather(u);
    wait(u);
  }
  void release(Unit& u) {
    wait(u);
    if (u.state != Unit::State::gathered || whole_) return;
    for (std::size_t b : u.buckets) flat_[b].impl()->storage()->give_memory_back();
    u.state = Unit::State::released;
  }
  void take_gradients(Unit& u) {
    for (std::size_t b : u.buckets) {
      const Tensor& g = engine_->bucket_buffer(b);
      if (g.impl()->storage()->holds_memory()) continue;
      g.impl()->storage()->take_memory();
      Tensor(g).fill_(0.0);  // (the padding too: it is summed with the rest)
    }
  }
  void give_back_gradients(Unit& u) {
    for (std::size_t b : u.buckets) engine_->bucket_buffer(b).impl()->storage()->give_memory_back();
  }
  std::size_t position(std::size_t j) const {
    return static_cast<std::size_t>(std::find(order_.begin(), order_.end(), j) - order_.begin());
  }

  // A unit's forward begins: its parameters whole, the next unit's all-gather started.
  void before_forward(std::size_t j) {
    Unit& u = units_[j];
    gathered(u);
    std::size_t at = position(j);
    if (at == order_.size()) order_.push_back(j);  // the first forward records the units' order
    if (order_complete_ && !inline_ && at + 1 < order_.size()) start_gather(units_[order_[at + 1]]);
  }
  // It ended: a node at its output that prepares its backward; its parameters given back,
  // unless its backward comes next (the last unit of a forward that records gradients).
  Tensor after_forward(std::size_t j, Tensor out) {
    Unit& u = units_[j];
    const bool recording = GradMode::enabled() && autograd::tracks_grad(out);
    if (recording) out = call_in_backward(out, *u.hook);
    const bool backward_next = recording && order_complete_ && !order_.empty() && order_.back() == j;
    if (!backward_next) release(u);
    return out;
  }
  // Backward reaches the unit's output: its gradient bucket takes memory, its parameters are
  // gathered again, the previous unit's all-gather starts; units whose reduce-scatter has
  // completed give their gradient buckets back, and of those still reducing all but the one
  // that finished last are waited for (at most two units' gradient buckets are held).
  void before_backward(std::size_t j) {
    Unit& u = units_[j];
    u.final_params = 0;  // (every call's callback runs before the hooks of the unit's parameters)
    u.backward_ran = true;
    take_gradients(u);
    gathered(u);
    const std::size_t at = position(j);
    if (order_complete_ && !inline_ && at > 0 && at < order_.size()) start_gather(units_[order_[at - 1]]);
    Unit* newest = nullptr;  // the unit whose backward finished last and whose bucket is held
    for (std::size_t at_v = at + 1; at_v < order_.size() && newest == nullptr; ++at_v) {
      Unit& v = units_[order_[at_v]];
      if (v.backward_ran && v.final_params == v.params && holds_gradients(v)) newest = &v;
    }
    for (Unit& v : units_) {
      if (&v == &u || !v.backward_ran || v.final_params != v.params || !holds_gradients(v)) continue;
      if (&v != newest) wait_reduced(v);  // (the buckets whose reduce-scatter has started)
      if (reduced(v)) give_back_gradients(v);
    }
  }
  bool holds_gradients(const Unit& u) const {
    for (std::size_t b : u.buckets)
      if (engine_->bucket_buffer(b).impl()->storage()->holds_memory()) return true;
    return false;
  }
  void wait_reduced(Unit& u) {
    for (std::size_t b : u.buckets) engine_->wait_reduced(b);
  }
  bool reduced(Unit& u) {
    for (std::size_t b : u.buckets)
      if (!engine_->reduced(b)) return false;
    return true;
  }

  // The parameters' device: host memory, or the device collective's.
  Device device() const { return params_.empty() ? Device::cpu() : params_.front().device(); }
  bool on_device() const { return device().kind != DeviceKind::cpu; }

  static std::vector<Tensor> checked(C& comm, std::vector<Tensor> params) {
    Device home = Device::cpu();
    if constexpr (collective::DeviceCollective<C>) home = Device::cuda(comm.device());
    (void)comm;
    for (std::size_t k = 0; k < params.size(); ++k) {
      const Tensor& p = params[k];
      STRATA_CHECK(p.device() == home && p.is_contiguous(), "ShardedStrategy<", C::name, ">: parameter ", k, " (",
                   p.shape(), ") is not a contiguous tensor on ", home, ", where ", C::name,
                   "'s collectives move it (it is on ", p.device(), ")");
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
  std::vector<Tensor> staging_;  // per unit's bucket: this rank's block, kept and sent by the all-gather
  std::vector<optim::ElementRange> ranges_;  // per parameter: this rank's elements of it
  std::vector<Tensor> shards_;   // per parameter: those elements, viewing flat_ (a unit's: staging_)
  std::size_t held_ = 0;
  std::vector<Unit> units_;          // stage 3's wrap units
  std::vector<std::size_t> order_;   // the units in the order the first forward called them
  bool order_complete_ = false;      // a whole step has run: order_ is the forward's order
  bool whole_ = false;               // gather_all() holds every unit whole until release_all()
  bool inline_ = false;              // stage 3's collectives blocking on this thread (gathers_inline)
  // What the parameters' hooks reach this model through, emptied as it ends: the model's
  // parameters, and their hooks, may outlive it.
  std::shared_ptr<ShardedModel*> self_ = std::make_shared<ShardedModel*>(this);
};

}  // namespace strata::detail


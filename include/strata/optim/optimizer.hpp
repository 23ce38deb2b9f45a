/// \file
/// What every optimizer shares: its parameter list, learning rate, step counter, named state
/// (for checkpoints), and the update rule applied to whole parameters (step) or to ranges of
/// them (step_ranges). An optimizer is a pure update rule: it knows no replica, strategy or
/// collective. apply_gradients(ctx, grads) runs the update protocol (run_update) over the
/// stages the strategy behind `ctx` supplies (update_stages.hpp): aggregate, transform, this
/// optimizer's rule where the stages place it, publish.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/backward.hpp>  // Gradients
#include <strata/kernels/cpu/optim_step.hpp>  // all_zero
#include <strata/optim/gradient_transforms.hpp>
#include <strata/optim/loss_scale.hpp>
#include <strata/optim/nonfinite.hpp>
#include <strata/optim/schedule.hpp>
#include <strata/optim/update_stages.hpp>
#include <strata/tensor/factory.hpp>     // zeros

namespace strata::optim {

class Optimizer;

/// How an optimizer updates a row-sparse table (an Embedding with TableGradient::row_sparse;
/// docs/design/sparse_tables.md).
enum class SparseUpdates {
  /// Only the rows whose aggregated gradient row is not all zero, with their state (momentum,
  /// moments); the other rows and their state stay as they are (PyTorch's SparseAdam). The
  /// same rows on every strategy, whether the gradient arrives in rows or dense.
  lazy,
  /// The dense rule on the gradient made dense: equal to a run with dense gradients.
  dense,
};

/// The shared part of SGD, Adam and AdamW.
class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
    STRATA_CHECK(lr >= 0.0, "learning rate must be non-negative, got ", lr);
    for (std::size_t i = 0; i < params_.size(); ++i)
      STRATA_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(), "parameter ", i,
                   " is not a leaf tensor that requires gradients");
  }
  virtual ~Optimizer() = default;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  double lr() const noexcept { return lr_; }
  void set_lr(double lr) {
    STRATA_CHECK(lr >= 0.0, "learning rate must be non-negative, got ", lr);
    lr_ = lr;
  }
  std::int64_t steps() const noexcept { return steps_; }

  /// Sets the learning rate from `s` before each update from now on (schedule.hpp); the rate
  /// of the update at step k is s(k), whatever set_lr said before.
  void set_schedule(Schedule s) { schedule_ = std::move(s); }
  /// Drops the schedule: the rate stays where it is.
  void clear_schedule() noexcept { schedule_.reset(); }
  const std::optional<Schedule>& schedule() const noexcept { return schedule_; }
  /// Scales the aggregated gradients by max_norm / their global norm where it exceeds
  /// max_norm (tf.clip_by_global_norm, PyTorch's clip_grad_norm_); 0 turns it off.
  void clip_by_global_norm(double max_norm) {
    STRATA_CHECK(max_norm >= 0 && std::isfinite(max_norm), "clip_by_global_norm: max_norm must be finite and "
                 "non-negative, got ", max_norm);
    transforms_.max_global_norm = max_norm;
  }
  /// Clamps every aggregated gradient element to [-max_abs, max_abs]; 0 turns it off.
  void clip_by_value(double max_abs) {
    STRATA_CHECK(max_abs >= 0 && std::isfinite(max_abs), "clip_by_value: max_abs must be finite and non-negative, "
                 "got ", max_abs);
    transforms_.max_value = max_abs;
  }
  /// A transform of the aggregated gradients of your own, changing them in place (grads[i] is
  /// parameter i's); it runs before the clipping. An empty function removes it.
  void set_gradient_transform(std::function<void(const Gradients&)> fn) { transforms_.user = std::move(fn); }
  const GradientTransforms& gradient_transforms() const noexcept { return transforms_; }

  /// Turns on a dynamic loss scale (loss_scale.hpp), which a float16 run needs: backward then
  /// takes scale_loss(loss), and each update divides the aggregated gradients by the scale
  /// before anything reads them, skips a step whose gradients are not all finite (counted in
  /// skipped_steps()) and moves the scale. Checkpoints hold its state.
  void set_loss_scale(LossScaleOptions o = {}) { loss_scale_.emplace(o); }
  /// Turns it off: gradients are used as they come.
  void clear_loss_scale() noexcept { loss_scale_.reset(); }
  /// The loss scale, or none.
  const std::optional<LossScale>& loss_scale() const noexcept { return loss_scale_; }
  /// Restores the scale a checkpoint saved (set_loss_scale first).
  void restore_loss_scale(double scale, std::int64_t clean_steps) {
    STRATA_CHECK(loss_scale_.has_value(), "restore_loss_scale: this optimizer has no loss scale (set_loss_scale)");
    loss_scale_->restore(scale, clean_steps);
  }
  /// The loss backward should differentiate: `loss` times the current scale, or `loss` itself
  /// without a loss scale.
  Tensor scale_loss(const Tensor& loss) const { return loss_scale_ ? mul(loss, loss_scale_->scale()) : loss; }

  /// Sets the rate for the coming update from the schedule, if there is one (the update
  /// protocol calls it first, before the parameter servers are told the rate).
  void begin_update() {
    if (schedule_) lr_ = (*schedule_)(steps_);
  }
  const std::vector<Tensor>& params() const noexcept { return params_; }

  /// How row-sparse tables are updated (SparseUpdates::lazy by default).
  void set_sparse_updates(SparseUpdates s) noexcept { sparse_ = s; }
  SparseUpdates sparse_updates() const noexcept { return sparse_; }
  /// Whether parameter i is updated by rows: a row-sparse table, in host memory, under the
  /// lazy rule of an optimizer that has one.
  bool updates_by_rows(std::size_t i) const {
    const Tensor& p = params_.at(i);
    return sparse_ == SparseUpdates::lazy && p.impl()->ag.row_sparse && p.ndim() >= 1 && p.device().kind == DeviceKind::cpu &&
           updates_ranges();
  }

  /// Updates every parameter from its .grad(); parameters without a gradient are skipped.
  /// Holding shards (hold_shards), it updates each shard from the shard's gradient instead.
  void step() {
    NoGradGuard no_grad;
    if (!shards_.empty()) {
      for (std::size_t i = 0; i < shards_.size(); ++i) {
        const Tensor g = shards_[i].grad();
        if (g.defined() && shards_[i].numel() > 0) update(i, shards_[i], g);
      }
      ++steps_;
      return;
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (updates_by_rows(i)) {
        step_rows(i, {0, params_[i].numel()});
        continue;
      }
      const Tensor g = params_[i].grad();
      if (!g.defined()) continue;
      update(i, params_[i], g);
    }
    ++steps_;
  }

  /// Whether this optimizer can update parts of its parameters (step_ranges): true for SGD,
  /// Adam and AdamW, whose updates are elementwise.
  virtual bool updates_ranges() const noexcept { return false; }
  /// Like step(), but updates only `ranges[i]` of parameter i (host memory), and its state
  /// there; the rest of each parameter and of its state is left as it is. Every parameter with
  /// a gradient gets its state tensors, even where its range is empty, so that replicas that
  /// split the update hold state of the same shapes (see share_state_from).
  void step_ranges(std::span<const ElementRange> ranges) {
    STRATA_CHECK_EQ(ranges.size(), params_.size(), "step_ranges: one range per parameter");
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].has_row_grad() && !params_[i].impl()->ag.grad.defined()) continue;
      const Tensor g = updates_by_rows(i) ? Tensor() : params_[i].grad();
      const ElementRange r = ranges[i];
      STRATA_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= params_[i].numel(), "step_ranges: range [", r.begin,
                   ", ", r.end, ") of parameter ", i, " with ", params_[i].numel(), " elements");
      if (updates_by_rows(i))
        step_rows(i, r);
      else
        update_range(i, params_[i], g, r);
    }
    ++steps_;
  }

  /// Makes this optimizer's state the very tensors `theirs` names (not copies; named as
  /// state() names them, each with its slot's shape and dtype), after copying into them what
  /// this optimizer holds in `mine` (its ranges of each parameter): replicas that update
  /// disjoint ranges then keep one complete state between them, which state() of any of them
  /// returns (detail::PartitionedUpdate's state home).
  void share_state_from(std::vector<std::pair<std::string, Tensor>> theirs, std::span<const ElementRange> mine) {
    STRATA_CHECK_EQ(mine.size(), params_.size(), "share_state_from: one range per parameter");
    const auto where = resolve_slots(theirs, "share_state_from");
    NoGradGuard no_grad;
    for (std::size_t k = 0; k < theirs.size(); ++k) {
      Tensor& own = slot(*where[k].first, where[k].second);
      const std::size_t i = where[k].second;
      Tensor& shared = theirs[k].second;
      if (own.defined() && !same_tensor(own, shared) && mine[i].end > mine[i].begin) {
        const std::size_t es = size_of(own.dtype());
        std::memcpy(static_cast<char*>(shared.raw_data()) + static_cast<std::size_t>(mine[i].begin) * es,
                    static_cast<const char*>(own.raw_data()) + static_cast<std::size_t>(mine[i].begin) * es,
                    static_cast<std::size_t>(mine[i].end - mine[i].begin) * es);
      }
      own = shared;
    }
    ++state_version_;
  }
  /// Changes whenever a state tensor is created or replaced (load_state, share_state_from).
  std::uint64_t state_version() const noexcept { return state_version_; }

  /// Makes this optimizer update `shards` instead of its parameters (ShardedStrategy): shard
  /// i a contiguous 1-D tensor holding this rank's elements of parameter i (none where another
  /// rank holds all of it), its gradient the aggregated one of those elements. The state of
  /// parameter i is then shaped like shard i, so a rank holds the state of its elements only
  /// (state() and load_state speak of the shards), and stage 2 reads the shards' gradients:
  /// the global norm and the finiteness are combined over the ranks by the update's stages
  /// (UpdateStages::sum_over_shards, all_finite). Before any state exists.
  void hold_shards(std::vector<Tensor> shards) {
    STRATA_CHECK_EQ(shards.size(), params_.size(), "hold_shards: one shard per parameter");
    for (std::size_t i = 0; i < shards.size(); ++i)
      STRATA_CHECK(shards[i].defined() && shards[i].ndim() == 1 && shards[i].is_contiguous() &&
                       shards[i].dtype() == params_[i].dtype() && shards[i].numel() <= params_[i].numel(),
                   "hold_shards: shard ", i, " is no contiguous 1-D part of parameter ", i, " (", params_[i].shape(), " ",
                   name_of(params_[i].dtype()), ")");
    STRATA_CHECK(state().empty(), "hold_shards: the optimizer already holds state for whole parameters");
    STRATA_REQUIRE(!transforms_.user, invalid_argument, "strata.optim.transform",
                   "a gradient transform of your own reads whole gradients, and a sharded strategy's ranks hold "
                   "only their shards of them: clip with clip_by_global_norm / clip_by_value, which combine over "
                   "the shards, or use MultiWorkerMirroredStrategy");
    shards_ = std::move(shards);
  }
  /// Whether this optimizer updates shards (hold_shards).
  bool holds_shards() const noexcept { return !shards_.empty(); }
  /// What the rule updates for parameter i: its shard (hold_shards), else the parameter.
  const Tensor& updated(std::size_t i) const { return shards_.empty() ? params_.at(i) : shards_.at(i); }

  /// Applies `grads` inside a strategy's run(): the strategy behind `ctx` sums them over
  /// every replica in sync, transforms them, updates with this optimizer's rule where it
  /// places the variables, and publishes the new values (run_update).
  template <UpdateDriver Ctx>
  void apply_gradients(Ctx& ctx, Gradients grads) {
    run_update(ctx.update_stages(), grads);
  }
  /// Steps with `grads` as they are (one replica, nothing to aggregate).
  void apply_gradients(Gradients grads) {
    LocalUpdate local;
    run_update(local, grads);
  }

  /// The update protocol: one update with `grads`, stage by stage over `stages`
  /// (update_stages.hpp), in this order and only here.
  void run_update(UpdateStages& stages, Gradients grads) {
    check_matches(grads);
    begin_update();  // the schedule's rate, before stage 1 hands it to parameter servers
    check_placement(stages);
    stages.note_optimizer(*this);
    if (loss_scale_ && stages.updates_elsewhere() && !unscaled_before_aggregation(stages, grads)) {
      stages.publish();  // 4: nothing changed, as on every replica in sync
      return;
    }
    bool here;
    {
      const StageScope stage(stages, UpdateStage::aggregate);
      here = stages.aggregate(grads, lr());  // 1
    }
    if (here) {
      const StageScope stage(stages, UpdateStage::update);
      // Holding shards, stages 2 and 3 read the shards' aggregated gradients.
      const Gradients mine = shards_.empty() ? grads : Gradients{shards_, nullptr};
      if (transform(stages, mine)) update_where(stages.layout(mine, *this), mine);  // 2, 3
    } else {
      step_elsewhere();  // the servers updated the variables this replica reads
    }
    stages.publish();  // 4
  }

  /// Counts a step whose update another replica or the parameter servers applied to the
  /// variables this optimizer's parameters share, so every replica's step count agrees.
  void step_elsewhere() noexcept { ++steps_; }

  /// Checks that `g` holds the gradients of this optimizer's parameters, in its order.
  void check_matches(const Gradients& g) const {
    STRATA_CHECK_EQ(g.size(), params_.size(), "apply_gradients: gradients for a different parameter list");
    for (std::size_t i = 0; i < params_.size(); ++i)
      STRATA_CHECK(same_tensor(g.params[i], params_[i]), "apply_gradients: gradient ", i,
                   " belongs to another parameter than the optimizer's");
  }

  /// Whether an update with `g` goes ahead under the non-finite policy: always under
  /// NonFinite::apply; under skip, false (counted in skipped_steps()) if any gradient holds a
  /// NaN or Inf; under error, a data_error naming the first such parameter, with `where()`
  /// appended (the update protocol names the replica it came from).
  template <class Where>
  bool admits(const Gradients& g, Where&& where) {
    if (nonfinite_ == NonFinite::apply) return true;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const RowGrad rows = g.rows(i);  // a row-sparse gradient is checked in its rows
      const Tensor t = rows.defined() ? rows.rows : g[i];
      if (!t.defined() || all_finite(t)) continue;
      if (nonfinite_ == NonFinite::skip) {
        ++skipped_;
        return false;
      }
      STRATA_THROW(data_error, "strata.optim.nonfinite", "non-finite gradient in parameter ", i, " (shape ",
                   to_string(t.shape()), ") at step ", steps_, ", after aggregation", where());
    }
    return true;
  }

  /// The policy for non-finite gradients (NonFinite::apply by default).
  void set_nonfinite(NonFinite p) noexcept {
    nonfinite_ = p;
    if (p == NonFinite::error) detail::local_nonfinite_checks().store(true, std::memory_order_relaxed);
  }
  NonFinite nonfinite() const noexcept { return nonfinite_; }
  /// Steps skipped for non-finite gradients (NonFinite::skip, or the loss scale's check).
  std::int64_t skipped_steps() const noexcept { return skipped_; }

  /// Named state tensors (buffers per parameter), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;

  /// Restores what state() returned, and the step count (from a checkpoint). Every tensor must
  /// name one of this optimizer's slots for one of its parameters, with that parameter's
  /// shape; anything else is an error naming it, and nothing is changed.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, std::int64_t steps) {
    STRATA_CHECK(steps >= 0, "load_state: a negative step count ", steps);
    const auto where = resolve_slots(state, "load_state");
    for (std::size_t k = 0; k < state.size(); ++k)
      slot(*where[k].first, where[k].second) = state[k].second.contiguous().clone();
    steps_ = steps;
    ++state_version_;
  }
  /// Checks what load_state or adopt_state would take, changing nothing: an error naming the
  /// first tensor that is no slot of this optimizer's or not of its parameter's shape.
  void check_state(const std::vector<std::pair<std::string, Tensor>>& state) {
    (void)resolve_slots(state, "check_state");
  }
  /// load_state for tensors nobody else holds (just read from a checkpoint): the contiguous
  /// ones become the slots as they are, with no copy, so a restore holds each slot once.
  void adopt_state(std::vector<std::pair<std::string, Tensor>> state, std::int64_t steps) {
    STRATA_CHECK(steps >= 0, "adopt_state: a negative step count ", steps);
    const auto where = resolve_slots(state, "adopt_state");
    for (std::size_t k = 0; k < state.size(); ++k) {
      Tensor& t = state[k].second;
      slot(*where[k].first, where[k].second) = t.is_contiguous() ? std::move(t) : t.contiguous().clone();
    }
    steps_ = steps;
    ++state_version_;
  }

  /// A fresh optimizer of the same kind and settings (the current learning rate, no state)
  /// over `params`: how a parameter server runs the user's optimizer on its partitions.
  virtual std::unique_ptr<Optimizer> clone_for(std::vector<Tensor> params) const = 0;

 protected:
  virtual void update(std::size_t i, Tensor& p, const Tensor& g) = 0;
  /// The slot vector state() names `prefix` (e.g. "momentum_buffer"), or null.
  virtual std::vector<Tensor>* slots_named(const std::string& prefix) = 0;

  /// Creates parameter i's state tensors where they do not exist yet (the lazy rule calls it
  /// before any row is updated).
  virtual void prepare_state(std::size_t i) { (void)i; }

  /// The lazy rule: updates the rows of parameter i (host memory, [V, ...]) that `g` names
  /// and their state, inside elements `r`, skipping rows whose gradient is all zero. Without
  /// a rule of its own, an optimizer updates densely (the gradient made dense).
  virtual void update_rows(std::size_t i, Tensor& p, const RowGrad& g, ElementRange r) {
    (void)g;
    if (r.begin == 0 && r.end == p.numel())
      update(i, p, p.grad());
    else
      update_range(i, p, p.grad(), r);
  }

  /// Updates elements [r.begin, r.end) of parameter i (host memory) from gradient g; the
  /// optimizers whose updates_ranges() is true override it.
  virtual void update_range(std::size_t i, Tensor& p, const Tensor& g, ElementRange r) {
    (void)i, (void)p, (void)g, (void)r;
    STRATA_THROW(::strata::invalid_argument, "strata.optim",
                 "this optimizer does not update ranges of its parameters (updates_ranges() is false)");
  }

  /// A zero state tensor shaped like parameter i (its shard: hold_shards), created on first use.
  Tensor& state_for(std::vector<Tensor>& slots, std::size_t i) {
    Tensor& t = slot(slots, i);
    if (!t.defined()) {
      const Tensor& like = updated(i);
      t = Tensor::empty(like.shape(), like.dtype(), like.device()).fill_(0.0);
      ++state_version_;
    }
    return t;
  }
  /// Entry i of a slot vector, which holds one entry per parameter (sized on first use).
  Tensor& slot(std::vector<Tensor>& slots, std::size_t i) {
    if (slots.size() != params_.size()) slots.resize(params_.size());
    return slots[i];
  }

 private:
  /// Brackets a stage for the strategy (stage_begins/stage_ends), an exception included.
  struct StageScope {
    StageScope(UpdateStages& s, UpdateStage which) : stages(s), stage(which) { stages.stage_begins(stage); }
    ~StageScope() { stages.stage_ends(stage); }
    StageScope(const StageScope&) = delete;
    StageScope& operator=(const StageScope&) = delete;
    UpdateStages& stages;
    UpdateStage stage;
  };

  /// What cannot run where the stages place the update (on parameter servers).
  void check_placement(const UpdateStages& stages) const {
    STRATA_REQUIRE(!(transforms_.active() && stages.updates_elsewhere()), invalid_argument, "strata.optim.transform",
                   "gradient clipping and transforms run on the aggregated gradients before the update, which the "
                   "parameter servers apply here: construct ParameterServerStrategy with update_on_servers = false "
                   "to clip on the workers");
    for (std::size_t i = 0; i < params_.size(); ++i)
      STRATA_REQUIRE(!(stages.updates_elsewhere() && !stages.updates_rows_elsewhere() && updates_by_rows(i)),
                     invalid_argument, "strata.optim.sparse", "parameter ", i,
                     " is a row-sparse table under the lazy rule, which parameter servers with sparse_tables = false "
                     "do not apply (they update whole partitions): call set_sparse_updates(SparseUpdates::dense) on "
                     "the optimizer, or leave sparse_tables on");
  }

  /// Where the update happens off this replica (on parameter servers, which only sum and
  /// apply): the loss scale's division and check on this replica's own gradients before they
  /// are pushed, agreed by every replica in sync (UpdateStages::all_finite). False: the step
  /// is skipped here and on every replica in sync.
  bool unscaled_before_aggregation(UpdateStages& stages, const Gradients& grads) {
    return scaled_step_goes_ahead(stages.all_finite(unscale(grads, loss_scale_->scale())));
  }

  /// The loss scale moved by a step's finiteness; false (the step skipped, and counted) where
  /// it was not finite.
  bool scaled_step_goes_ahead(bool finite) {
    loss_scale_->after_step(finite);
    if (!finite) ++skipped_;
    return finite;
  }

  /// Stage 2 on the aggregated gradients: the loss scale's division and check, whether the
  /// update goes ahead (the non-finite policy), then the transforms (clipping, the user's), the
  /// same on every replica.
  bool transform(UpdateStages& stages, const Gradients& grads) {
    // The loss scale and the transforms change the sums in place: where they are kept in shares
    // (GradientLayout::sharded), each replica's copy is made whole, and no share changes before
    // every replica has read it.
    if ((loss_scale_ || transforms_.active()) && grads.completion != nullptr && grads.completion->in_shares()) {
      grads.make_whole();
      stages.shares_read();
    }
    if (loss_scale_) {
      bool finite = unscale(grads, loss_scale_->scale());
      if (!shards_.empty()) finite = stages.all_finite(finite);  // each rank checked its shards
      if (!scaled_step_goes_ahead(finite)) return false;
    }
    if (!(shards_.empty() ? admits(grads, [&] { return stages.nonfinite_origin(); }) : admits_shards(stages, grads)))
      return false;
    // (nothing where none is active; over shards, the global norm's squares summed by the stages)
    transforms_.apply(grads, [&](double sq) { return shards_.empty() ? sq : stages.sum_over_shards(sq); });
    return true;
  }

  /// admits() over shards: each rank checks its own, and every rank learns whether all were
  /// finite (UpdateStages::all_finite), so all skip, or all fail, in the same step.
  bool admits_shards(UpdateStages& stages, const Gradients& g) {
    if (nonfinite_ == NonFinite::apply) return true;
    std::int64_t first = -1;
    for (std::size_t i = 0; i < g.size() && first < 0; ++i)
      if (const Tensor t = g.params[i].grad(); t.defined() && !all_finite(t)) first = static_cast<std::int64_t>(i);
    if (stages.all_finite(first < 0)) return true;
    if (nonfinite_ == NonFinite::skip) {
      ++skipped_;
      return false;
    }
    STRATA_THROW(data_error, "strata.optim.nonfinite", "non-finite gradient ",
                 first >= 0 ? "in parameter " + std::to_string(first) + " (this rank's shard of it)"
                            : std::string("on another rank's shard"),
                 " at step ", steps_, ", after aggregation");
  }

  /// Stage 3: this optimizer's rule where `layout` places this replica's update.
  void update_where(UpdateLayout layout, const Gradients& grads) {
    switch (layout.way) {
      case UpdateLayout::Way::ranges:
        // The lazy sparse rule keeps or skips a row by its whole gradient row, which a replica
        // holding its share of the sums alone (GradientLayout::sharded) must first gather.
        for (std::size_t i = 0; i < params_.size(); ++i)
          if (updates_by_rows(i)) {
            grads.make_whole();
            break;
          }
        step_ranges(*layout.ranges);
        break;
      case UpdateLayout::Way::whole:
        grads.make_whole();  // a strategy may keep them in shares (GradientLayout::sharded)
        step();
        break;
      case UpdateLayout::Way::elsewhere:
        step_elsewhere();
        break;
    }
  }
  static std::string to_string(const Shape& s) {
    std::string out = "[";
    for (int d = 0; d < s.ndim(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
    return out + "]";
  }

  /// The slot vector and parameter index each named tensor of `state` goes to. Every name
  /// must be one of this optimizer's slots for one of its parameters, with that parameter's
  /// shape and dtype; anything else is an error naming it (before anything changes).
  std::vector<std::pair<std::vector<Tensor>*, std::size_t>> resolve_slots(
      const std::vector<std::pair<std::string, Tensor>>& state, const char* what) {
    std::vector<std::pair<std::vector<Tensor>*, std::size_t>> where;
    for (const auto& [name, t] : state) {
      const auto dot = name.rfind('.');
      std::vector<Tensor>* slots = dot == std::string::npos ? nullptr : slots_named(name.substr(0, dot));
      std::size_t i = 0;
      bool index_ok = dot != std::string::npos && dot + 1 < name.size();
      for (std::size_t k = dot + 1; index_ok && k < name.size(); ++k) index_ok = name[k] >= '0' && name[k] <= '9';
      if (index_ok) i = std::stoul(name.substr(dot + 1));
      STRATA_CHECK(slots != nullptr && index_ok && i < params_.size(), what, ": '", name,
                   "' is not a state slot of this optimizer for one of its ", params_.size(), " parameters");
      const Tensor& like = updated(i);
      STRATA_CHECK(t.shape() == like.shape() && t.dtype() == like.dtype(), what, ": shape mismatch for '", name,
                   "': ", t.shape(), " ", name_of(t.dtype()), " in the checkpoint vs ", like.shape(), " ",
                   name_of(like.dtype()), shards_.empty() ? " for the parameter" : " for this rank's shard of it");
      where.emplace_back(slots, i);
    }
    return where;
  }

  /// The lazy rule on parameter i's elements [r.begin, r.end): from its rows where the
  /// gradient is in rows, otherwise from the dense gradient; each row in the range kept or
  /// skipped by its whole gradient row (so replicas whose ranges cut a row decide alike), the
  /// part of it inside the range updated.
  void step_rows(std::size_t i, ElementRange r) {
    Tensor& p = params_[i];
    if (!p.has_row_grad() && !p.impl()->ag.grad.defined()) return;
    // The state exists from the first gradient on, whichever rows this replica's range
    // updates (replicas that split the update hold state of the same shapes), and every row
    // starts its state alike, in whichever call it is first updated.
    prepare_state(i);
    if (p.has_row_grad()) return update_rows(i, p, p.row_grad(), r);
    const Tensor g = p.grad();
    if (!g.defined() || r.end <= r.begin) return;
    const std::int64_t width = p.dim(0) > 0 ? p.numel() / p.dim(0) : 1;
    strata::detail::visit_floating(p.dtype(), "sparse update", [&](auto tag) {
      using T = decltype(tag);
      const T* gp = g.template data<T>();
      for (std::int64_t row = r.begin / width; row * width < r.end; ++row) {
        const std::int64_t lo = row * width;
        if (kernels::cpu::all_zero(width, gp + lo)) continue;
        update_range(i, p, g, {std::max(lo, r.begin), std::min(lo + width, r.end)});
      }
    });
  }

  std::vector<Tensor> params_;
  std::vector<Tensor> shards_;  // hold_shards: what the rule updates instead
  double lr_;
  std::optional<Schedule> schedule_;
  GradientTransforms transforms_;
  std::optional<LossScale> loss_scale_;
  std::int64_t steps_ = 0, skipped_ = 0;
  std::uint64_t state_version_ = 0;
  NonFinite nonfinite_ = NonFinite::apply;
  SparseUpdates sparse_ = SparseUpdates::lazy;
};

namespace detail {
inline std::vector<std::pair<std::string, Tensor>> named_slots(const char* prefix, const std::vector<Tensor>& slots) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i].defined()) out.emplace_back(std::string(prefix) + "." + std::to_string(i), slots[i]);
  return out;
}
}  // namespace detail

}  // namespace strata::optim

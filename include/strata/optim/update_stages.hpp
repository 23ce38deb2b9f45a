/// \file
/// UpdateStages: what places an optimizer's update among replicas, stage by stage, for the
/// update protocol (Optimizer::run_update, which calls them in order):
///
///   1. aggregate — the gradients combined over the replicas in sync (the bucketed engine's
///                  all-reduce, the central sum, or a push to the parameter servers);
///   2. transform — on the aggregated gradients, the same bits on every replica (or each
///                  replica's shards of them, combined where a sum needs all: hold_shards): the loss
///                  scale's division and check (loss_scale.hpp; where the update happens
///                  elsewhere, on each replica's own gradients before stage 1, agreed by
///                  all_finite), the non-finite policy (skip or error), then the optimizer's gradient
///                  transforms (gradient_transforms.hpp: a user's, clipping by value and by
///                  the global norm);
///   3. update    — the optimizer's rule on the whole of each parameter, on this replica's
///                  share of it (a split update), or nowhere (another replica updates);
///   4. publish   — the new values made visible to every replica.
///
/// The defaults are one replica's: nothing to aggregate or publish, the whole update here.
/// A strategy's replica context supplies its own (strategies' detail::ReplicaStep), and
/// Optimizer::apply_gradients(ctx, grads) takes them from `ctx.update_stages()`: the optimizer
/// knows no replica and calls no collective, and nothing here knows a strategy.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include <strata/autograd/backward.hpp>  // Gradients

namespace strata::optim {

class Optimizer;

/// A contiguous run of one parameter's elements, [begin, end) in its flat (row-major) order:
/// the part of it one replica updates when a strategy splits the update (step_ranges).
struct ElementRange {
  std::int64_t begin = 0, end = 0;
};

/// How this replica applies the optimizer's rule in a step (stage 3).
struct UpdateLayout {
  enum class Way {
    whole,     ///< the whole of every parameter (its own copy)
    ranges,    ///< `ranges` of each parameter: its share of a split update
    elsewhere  ///< nothing: another replica updates the variables this one shares
  };
  Way way = Way::whole;
  const std::vector<ElementRange>* ranges = nullptr;  // Way::ranges only

  static UpdateLayout whole() { return {}; }
  static UpdateLayout share(const std::vector<ElementRange>& r) { return {Way::ranges, &r}; }
  static UpdateLayout elsewhere() { return {Way::elsewhere, nullptr}; }
};

/// The stages the protocol brackets, for a strategy that times them (its timeline).
enum class UpdateStage { aggregate, update };

class UpdateStages {
 public:
  /// Stage 1: sums `g` over every replica in sync, in place. `lr`: the learning rate the
  /// update is about to apply (a strategy that updates elsewhere, on parameter servers,
  /// passes it on). False where the update already happened elsewhere and this replica's
  /// parameters hold its result (then stages 2 and 3 do not run here).
  virtual bool aggregate(Gradients g, double lr) {
    (void)g, (void)lr;
    return true;
  }

  /// Under NonFinite::error, where the non-finite gradients came from, appended to the
  /// error's message ("" where the strategy cannot tell). Every replica calls it, at the same
  /// point (the summed gradients are the same bits everywhere), so it may meet the others.
  virtual std::string nonfinite_origin() { return {}; }

  /// After a replica made sums kept in shares whole (GradientLayout::sharded) for stage 2: none
  /// may change its own share in place before every replica has read it.
  virtual void shares_read() {}

  /// Whether every replica in sync found its own gradients all finite (`mine`: this one's):
  /// before stage 1 where stage 3 happens elsewhere and a loss scale checks each replica's own
  /// gradients; in stage 2 where each replica holds its shards of the sums (hold_shards).
  /// Every replica in sync calls it, at the same point, so it may meet the others.
  virtual bool all_finite(bool mine) { return mine; }
  /// In stage 2 where each replica holds its shards of the sums (Optimizer::hold_shards): the
  /// sum of `mine` over the replicas in sync (the global norm's squares). Every replica calls it.
  virtual double sum_over_shards(double mine) { return mine; }

  /// Whether stage 3 happens off this replica (on parameter servers), so that stage 2's
  /// gradient transforms cannot run here.
  virtual bool updates_elsewhere() const { return false; }
  /// Where stage 3 happens elsewhere: whether it applies the optimizer's lazy rule to
  /// row-sparse tables (the sparse parameter server, which updates them by rows).
  virtual bool updates_rows_elsewhere() const { return false; }
  /// Before stage 1: the optimizer whose update this is (its rule on row-sparse tables
  /// travels with the gradients where the update runs elsewhere).
  virtual void note_optimizer(const Optimizer& opt) { (void)opt; }

  /// Stage 3: how this replica applies `opt`'s rule to `g` (already aggregated and
  /// transformed). The default: every replica updates the whole of its own copy.
  virtual UpdateLayout layout(const Gradients& g, Optimizer& opt) {
    (void)g, (void)opt;
    return UpdateLayout::whole();
  }

  /// Stage 4, after every apply_gradients (updated here or not): makes the new values visible
  /// to every replica that reads them.
  virtual void publish() {}

  /// While off, backward passes leave gradients local (NoSync: gradient accumulation).
  virtual void set_gradient_sync(bool on) { (void)on; }

  /// Brackets stage 1 and stages 2-3 (a strategy's timeline events); begins() and ends()
  /// pair up, an exception included.
  virtual void stage_begins(UpdateStage s) { (void)s; }
  virtual void stage_ends(UpdateStage s) { (void)s; }

 protected:
  UpdateStages() = default;
  UpdateStages(const UpdateStages&) = default;
  UpdateStages& operator=(const UpdateStages&) = default;
  ~UpdateStages() = default;
};

/// One replica's stages: the update as Optimizer::apply_gradients(grads) makes it.
class LocalUpdate final : public UpdateStages {};

/// A replica context whose strategy places an optimizer's update: `ctx.update_stages()`.
template <class C>
concept UpdateDriver = requires(C& c) {
  { c.update_stages() } -> std::same_as<UpdateStages&>;
};

}  // namespace strata::optim

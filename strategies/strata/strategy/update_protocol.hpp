/// \file
/// The update protocol: what happens between backward and the new parameter values, in one
/// place. Optimizer::apply_gradients(ctx, grads) calls run_update, which drives four stages
/// through the strategy's side of the replica (detail::ReplicaStep) and the optimizer's rule:
///
///   1. aggregate — the strategy combines the replicas' gradients (the bucketed engine's
///                  all-reduce, the central sum, or a push to the parameter servers);
///   2. transform — on the aggregated gradients, the same bits on every replica: the
///                  non-finite policy (skip or error), then the optimizer's gradient
///                  transforms (optim/gradient_transforms.hpp: a user's, clipping by value
///                  and by the global norm);
///   3. update    — the optimizer's rule on the whole of each parameter, on this replica's
///                  share of it (a split update), or nowhere (another replica updates);
///   4. publish   — the strategy makes the new values visible to every replica.
///
/// The optimizer knows no replica and calls no collective; autograd knows nothing of this.
#pragma once

#include <cstdint>
#include <string>

#include <strata/autograd/backward.hpp>  // Gradients
#include <strata/collective/reduce_op.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/strategy/detail/replica_step.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/factory.hpp>  // full

namespace strata {

namespace detail {

/// Where the non-finite gradients came from, for NonFinite::error's message: every replica
/// takes part (they all get here, since the summed gradients are the same bits everywhere)
/// in two small all-reduces — the lowest replica whose own gradients held a NaN or Inf, then
/// that replica's first such parameter. "" where the strategy cannot tell.
inline std::string first_nonfinite_replica(ReplicaContext& ctx, const ReplicaStep& step) {
  const std::int64_t mine = step.local_nonfinite_parameter();  // -1: none here; -2: unknown
  if (mine == -2) return {};
  constexpr double kNone = 1e18;
  const int me = ctx.replica_id_in_sync_group();
  Tensor who = full(Shape{1}, mine >= 0 ? me : kNone, DType::f64);
  ctx.all_reduce(ReduceOp::Min, who);
  const double first = who.item();
  if (first >= kNone) return {};  // no replica saw one before the sum (an overflow in it)
  Tensor which = full(Shape{1}, me == static_cast<int>(first) ? double(mine) : kNone, DType::f64);
  ctx.all_reduce(ReduceOp::Min, which);
  return "; first non-finite on replica " + std::to_string(static_cast<int>(first)) + " (its parameter " +
         std::to_string(static_cast<std::int64_t>(which.item())) + ")";
}

/// Stage 2 on the aggregated gradients: whether the update goes ahead (the non-finite
/// policy), then the optimizer's transforms (clipping, the user's), the same on every replica.
inline bool transform_gradients(ReplicaContext& ctx, const ReplicaStep& step, optim::Optimizer& opt,
                                const Gradients& grads) {
  if (!opt.admits(grads, [&] { return first_nonfinite_replica(ctx, step); })) return false;
  if (!opt.gradient_transforms().active()) return true;
  if (grads.completion != nullptr) {  // sums kept in shares (GradientLayout::sharded)
    grads.make_whole();
    // Making them whole, the replicas read each other's shares: none may change its own in
    // place before every one has (an all-reduce of one word is the barrier).
    Tensor word = full(Shape{1}, 0.0, DType::f64);
    ctx.all_reduce(ReduceOp::Sum, word);
  }
  opt.gradient_transforms().apply(grads);
  return true;
}

/// Stage 3: `opt`'s rule where `layout` places this replica's update.
inline void update(optim::Optimizer& opt, const Gradients& grads, UpdateLayout layout) {
  switch (layout.way) {
    case UpdateLayout::Way::ranges:
      // The lazy sparse rule keeps or skips a row by its whole gradient row, which a replica
      // holding its share of the sums alone (GradientLayout::sharded) must first gather.
      for (std::size_t i = 0; i < opt.params().size(); ++i)
        if (opt.updates_by_rows(i)) {
          grads.make_whole();
          break;
        }
      opt.step_ranges(*layout.ranges);
      break;
    case UpdateLayout::Way::whole:
      grads.make_whole();  // a strategy may keep them in shares (GradientLayout::sharded)
      opt.step();
      break;
    case UpdateLayout::Way::elsewhere:
      opt.step_elsewhere();
      break;
  }
}

}  // namespace detail

/// One optimizer update inside a strategy's run(), stage by stage (see the file comment):
/// what Optimizer::apply_gradients(ctx, grads) does.
inline void run_update(ReplicaContext& ctx, optim::Optimizer& opt, Gradients grads) {
  opt.check_matches(grads);
  opt.begin_update();  // the schedule's rate, before stage 1 hands it to parameter servers
  detail::ReplicaStep& step = detail::step_of(ctx);
  STRATA_REQUIRE(!(opt.gradient_transforms().active() && step.updates_elsewhere()), invalid_argument,
                 "strata.optim.transform", "gradient clipping and transforms run on the aggregated gradients before "
                 "the update, which the parameter servers apply here: construct ParameterServerStrategy with "
                 "update_on_servers = false to clip on the workers");
  for (std::size_t i = 0; i < opt.params().size(); ++i)
    STRATA_REQUIRE(!(step.updates_elsewhere() && !step.updates_rows_elsewhere() && opt.updates_by_rows(i)),
                   invalid_argument, "strata.optim.sparse",
                   "parameter ", i, " is a row-sparse table under the lazy rule, which parameter servers with "
                   "sparse_tables = false do not apply (they update whole partitions): call "
                   "set_sparse_updates(SparseUpdates::dense) on the optimizer, or leave sparse_tables on");
  step.note_optimizer(opt);
  bool here;
  {
    observe::ScopedEvent ev("aggregate gradients", "communication");
    here = step.aggregate(grads, opt.lr());  // 1
  }
  if (here) {
    observe::ScopedEvent ev("optimizer step", "compute");
    if (detail::transform_gradients(ctx, step, opt, grads))  // 2
      detail::update(opt, grads, step.layout(grads, opt));   // 3
  } else {
    opt.step_elsewhere();  // the servers updated the variables this replica reads
  }
  step.publish();  // 4
}

}  // namespace strata

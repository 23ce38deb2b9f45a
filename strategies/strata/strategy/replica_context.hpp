/// \file
/// ReplicaContext: what code running inside Strategy::run sees — its replica id, how many
/// replicas train in sync, and the cross-replica all-reduce. Each strategy supplies its own
/// implementation; user code only sees this interface, so one training loop serves them all.
/// The strategy's side of a step (aggregation, the update's layout, publishing) sits behind
/// it in a detail::ReplicaStep, whose stages Optimizer::apply_gradients(ctx, grads) runs
/// (optim/update_stages.hpp).
#pragma once

#include <cstdint>
#include <string>

#include <strata/collective/reduce_op.hpp>  // ReduceOp
#include <strata/optim/update_stages.hpp>
#include <strata/strategy/detail/replica_step.hpp>
#include <strata/tensor/factory.hpp>  // full
#include <strata/tensor/tensor.hpp>

namespace strata {

class ReplicaContext;

namespace detail {
/// The strategy's side of `ctx`: for the update protocol and NoSync, never for users.
inline ReplicaStep& step_of(ReplicaContext& ctx) noexcept;
}  // namespace detail

/// The replica-side view of a strategy (tf.distribute.ReplicaContext).
class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;

  /// 0-based id of this replica among all replicas in sync (across processes).
  virtual int replica_id_in_sync_group() const noexcept = 0;
  /// Replicas that take part in each step, across every process.
  virtual int num_replicas_in_sync() const noexcept = 0;

  /// Reduces `t` across all replicas, in place; every replica must call it with the same shape.
  virtual void all_reduce(ReduceOp op, Tensor& t) = 0;

  /// Stage 1 of the update protocol alone: sums `grads` over every replica in sync, in place;
  /// false where the update already happened elsewhere (on parameter servers, which keep
  /// their learning rate). Optimizer::apply_gradients(ctx, grads) runs the whole step.
  [[deprecated("opt.apply_gradients(ctx, grads) runs the whole step (optim/update_stages.hpp)")]]
  bool aggregate_gradients(Gradients grads) { return step_->aggregate(grads, -1.0); }

  /// The strategy's stages of an optimizer's update, which Optimizer::apply_gradients(ctx,
  /// grads) runs (optim::UpdateDriver).
  optim::UpdateStages& update_stages() noexcept { return *step_; }

 protected:
  /// `step`: the strategy's side of this replica's step; it outlives the context.
  explicit ReplicaContext(detail::ReplicaStep& step) noexcept : step_(&step) { step.context_ = this; }
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

 private:
  friend detail::ReplicaStep& detail::step_of(ReplicaContext& ctx) noexcept;
  detail::ReplicaStep* step_;
};

inline detail::ReplicaStep& detail::step_of(ReplicaContext& ctx) noexcept { return *ctx.step_; }

inline std::string detail::ReplicaStep::nonfinite_origin() {
  const std::int64_t mine = local_nonfinite_parameter();  // -1: none here; -2: unknown
  if (mine == -2 || context_ == nullptr) return {};
  ReplicaContext& ctx = *context_;
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

inline void detail::ReplicaStep::shares_read() {
  if (context_ == nullptr) return;
  Tensor word = full(Shape{1}, 0.0, DType::f64);
  context_->all_reduce(ReduceOp::Sum, word);
}

/// Keeps the backward passes of its lifetime from communicating, for gradient accumulation
/// (DDP's no_sync): pass k-1 micro-batches under it with GradAccumulation::accumulate, then the
/// last one outside it, then apply_gradients: one all-reduce per k micro-batches.
class NoSync {
 public:
  explicit NoSync(ReplicaContext& ctx) : step_(detail::step_of(ctx)) { step_.set_gradient_sync(false); }
  ~NoSync() { step_.set_gradient_sync(true); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  detail::ReplicaStep& step_;
};

}  // namespace strata


/// \file
/// ReplicaContext: what code running inside Strategy::run sees — its replica id, how many
/// replicas train in sync, and the cross-replica operations. Each strategy supplies its own
/// implementation; user code only sees this interface, so one training loop serves them all.
#pragma once

#include <vector>

#include <strata/autograd/backward.hpp>         // Gradients
#include <strata/collective/reduce_op.hpp>      // ReduceOp
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace optim {
class Optimizer;
struct ElementRange;
}  // namespace optim

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
  /// Sums every gradient across all replicas in sync, in place, and says whether this replica
  /// takes part in the update (false where it runs elsewhere, as on parameter servers). What
  /// Optimizer::apply_gradients calls before its update.
  virtual bool aggregate_gradients(Gradients grads) = 0;
  /// Called by apply_gradients before aggregate_gradients with the learning rate it is about to
  /// apply: a strategy that runs the update elsewhere (on parameter servers) passes it on.
  virtual void note_learning_rate(double lr) { (void)lr; }
  /// Called by apply_gradients after the update: makes the new values visible to every replica.
  virtual void finish_update() {}
  /// Called by apply_gradients (with `opt`, the optimizer about to update) on a strategy that
  /// splits the update across its replicas: the ranges of each parameter this replica
  /// updates, or null to update all of it. finish_update then shares the ranges.
  virtual const std::vector<optim::ElementRange>* update_ranges(const Gradients& grads, optim::Optimizer& opt) {
    (void)grads, (void)opt;
    return nullptr;
  }
  /// Whether this replica applies an update that does not split (update_ranges gave null, or
  /// the optimizer cannot update ranges): yes where each replica updates its own copy; no on
  /// the replicas that share the variables of one that does (CentralStorageStrategy).
  virtual bool updates_unsplit() const { return true; }

  /// Under NonFinite::error: the index of this replica's first parameter whose own gradient
  /// (before the sum) held a NaN or Inf this step, -1 if none, -2 if this context cannot tell
  /// (then apply_gradients names no replica). A context that tells must let every replica
  /// take part in all_reduce when the summed gradients are non-finite.
  virtual std::int64_t local_nonfinite_parameter() const { return -2; }

  /// While off, backward passes leave gradients local (micro-batches of gradient accumulation:
  /// accumulate k passes, then one aggregation). See NoSync.
  virtual void set_gradient_sync(bool on) { (void)on; }

 protected:
  ReplicaContext() = default;
  ReplicaContext(const ReplicaContext&) = default;
  ReplicaContext& operator=(const ReplicaContext&) = default;
};

/// Keeps the backward passes of its lifetime from communicating, for gradient accumulation
/// (DDP's no_sync): pass k-1 micro-batches under it with GradAccumulation::accumulate, then the
/// last one outside it, then apply_gradients: one all-reduce per k micro-batches.
class NoSync {
 public:
  explicit NoSync(ReplicaContext& ctx) : ctx_(ctx) { ctx_.set_gradient_sync(false); }
  ~NoSync() { ctx_.set_gradient_sync(true); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  ReplicaContext& ctx_;
};

}  // namespace strata

/// \file
/// ReplicaContext: what code running inside Strategy::run sees — its replica id, how many
/// replicas train in sync, and the cross-replica operations. Each strategy supplies its own
/// implementation; user code only sees this interface, so one training loop serves them all.
#pragma once

#include <strata/autograd/backward.hpp>         // Gradients
#include <strata/collective/reduce_op.hpp>      // ReduceOp
#include <strata/tensor/tensor.hpp>

namespace strata {

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
  /// Sums every gradient across all replicas, in place (what apply_gradients calls).
  virtual void all_reduce_gradients(Gradients grads) = 0;

 protected:
  ReplicaContext() = default;
  ReplicaContext(const ReplicaContext&) = default;
  ReplicaContext& operator=(const ReplicaContext&) = default;
};

}  // namespace strata

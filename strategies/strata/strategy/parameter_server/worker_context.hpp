/// \file
/// ps::WorkerContext<S>: the ReplicaContext a ParameterServerStrategy's replica function gets
/// on a worker — its id among the workers (Sync), the workers' all-reduce (Sync), and the
/// update's stages: stage 1 pushes the gradients and pulls the new values or the sums
/// (ps::Worker::push_pull), stage 3 happens on the servers unless the workers update. The
/// strategy (S) is its friend.
#pragma once

#include <strata/autograd/backward.hpp>
#include <strata/collective/reduce_op.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/strategy/detail/process_replica.hpp>  // on_every_rank
#include <strata/strategy/detail/replica_step.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::ps {

template <class S>
class WorkerContext final : private strata::detail::ReplicaStep, public ReplicaContext {
 public:
  explicit WorkerContext(S& s) : ReplicaContext(static_cast<strata::detail::ReplicaStep&>(*this)), s_(s) {}
  int replica_id_in_sync_group() const noexcept override {
    return S::sync ? s_.t_.roles().index_of(s_.t_.rank()) : 0;
  }
  int num_replicas_in_sync() const noexcept override { return s_.num_replicas_in_sync(); }
  void all_reduce(ReduceOp op, Tensor& t) override {
    STRATA_CHECK(t.defined() && t.is_contiguous(), "all_reduce needs a defined, contiguous tensor");
    if (S::sync) s_.t_.group().allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
  }

 private:
  bool aggregate(Gradients g, double lr) override {
    STRATA_CHECK(sync_on_, "apply_gradients inside NoSync: the gradients would stay on this worker");
    s_.worker_->push_pull(g, lr);
    return !s_.o_.update_on_servers;  // else the servers updated and the parameters hold their values
  }
  void set_gradient_sync(bool on) override { sync_on_ = on; }
  /// The loss scale's check where the servers update: under Sync the workers' minimum, so
  /// every worker skips the push together (the servers wait for every worker's); under Async
  /// each worker's step is its own.
  bool all_finite(bool mine) override {
    return S::sync ? strata::detail::on_every_rank(s_.t_.group(), mine) : mine;
  }
  bool updates_elsewhere() const override { return s_.o_.update_on_servers; }
  bool updates_rows_elsewhere() const override { return s_.o_.sparse_tables; }
  void note_optimizer(const optim::Optimizer& opt) override {
    s_.worker_->set_lazy_rows(opt.sparse_updates() == optim::SparseUpdates::lazy);
  }

  S& s_;
  bool sync_on_ = true;
};

}  // namespace strata::ps

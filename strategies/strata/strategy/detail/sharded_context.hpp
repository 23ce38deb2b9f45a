/// \file
/// ShardedReplicaContext<C>: the replica context of ShardedStrategy. Gradients go through
/// their model's engine (reduce-scattered, or all-reduced whole, into each rank's blocks);
/// the optimizer updates this rank's shards (stage 2 reads their gradients, the global norm's
/// squares and the finiteness combined over the ranks here); publish all-gathers the
/// parameters. docs/sharding.md.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include <strata/strategy/detail/process_replica.hpp>  // on_every_rank
#include <strata/strategy/detail/replica_step.hpp>
#include <strata/strategy/detail/sharded_model.hpp>
#include <strata/strategy/replica_context.hpp>

namespace strata::detail {

template <class C>
class ShardedReplicaContext final : private ReplicaStep, public ReplicaContext {
 public:
  ShardedReplicaContext(C& comm, std::span<const std::unique_ptr<ShardedModel<C>>> models)
      : ReplicaContext(static_cast<ReplicaStep&>(*this)), comm_(comm), models_(models) {}

  int replica_id_in_sync_group() const noexcept override { return comm_.rank(); }
  int num_replicas_in_sync() const noexcept override { return comm_.size(); }

  void all_reduce(ReduceOp op, Tensor& t) override {
    STRATA_CHECK(t.defined() && t.is_contiguous(), "all_reduce needs a defined, contiguous tensor");
    for (const auto& m : models_) {  // after the gradient buckets and the units' all-gathers in flight
      m->engine().drain();
      m->quiesce();
    }
    comm_.allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
  }

 private:
  void note_optimizer(const optim::Optimizer& opt) override {
    STRATA_REQUIRE(opt.holds_shards() || opt.params().empty(), invalid_argument, "strata.strategy",
                   "ShardedStrategy: this optimizer updates whole parameters; make it inside strategy.scope(...), "
                   "over a model made there, so that it holds this rank's shards of them");
  }
  bool aggregate(Gradients g, double) override {
    for (const auto& m : models_)
      if (m->owns(g)) {
        pending_ = m.get();
        m->finish_gradients();
        return true;
      }
    STRATA_THROW(invalid_argument, "strata.strategy", "ShardedStrategy: apply_gradients with the gradients of "
                 "parameters that are no model made in strategy.scope(...)");
  }
  bool all_finite(bool mine) override { return on_every_rank(comm_, mine); }
  double sum_over_shards(double mine) override {
    comm_.allreduce_raw(&mine, &mine, 1, DType::f64, ReduceOp::Sum);
    return mine;
  }
  // Every rank's shards updated (or the step skipped on every rank): the whole parameters again.
  void publish() override {
    if (ShardedModel<C>* m = std::exchange(pending_, nullptr)) m->gather_parameters();
  }
  void set_gradient_sync(bool on) override {
    for (const auto& m : models_) m->engine().set_sync(on);
  }

  C& comm_;
  std::span<const std::unique_ptr<ShardedModel<C>>> models_;
  ShardedModel<C>* pending_ = nullptr;  // the model this step's apply_gradients updates
};

}  // namespace strata::detail

/// \file
/// CollectiveReplicaContext<C>: the replica context of the mirrored strategies — every
/// replica holds its own copy of the variables, so gradients are all-reduced (summed) over a
/// collective C and every replica applies the same update to its copy (or, where the
/// strategy splits it, its share of the update, written into the other copies too).
/// Gradients of a model created under the strategy's scope go through that model's
/// GradientEngine (bucketed, overlapped with backward); any other gradient list is
/// all-reduced here, tensor by tensor.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <strata/reducer/gradient_engine.hpp>
#include <strata/reducer/nonfinite_watch.hpp>
#include <strata/reducer/partitioned_update.hpp>
#include <strata/strategy/detail/replica_step.hpp>
#include <strata/strategy/replica_context.hpp>

namespace strata::detail {

template <class C>
class CollectiveReplicaContext final : private ReplicaStep, public ReplicaContext {
 public:
  /// `splits`: beside each engine, the PartitionedUpdate of its model's copies, or null (or empty:
  /// none); replica_id is then also the replica's index among the copies.
  CollectiveReplicaContext(C& comm, int replica_id, int num_replicas, std::span<GradientEngine<C>* const> engines,
                           std::span<PartitionedUpdate* const> splits = {})
      : ReplicaContext(static_cast<ReplicaStep&>(*this)), comm_(comm), id_(replica_id), n_(num_replicas), engines_(engines), splits_(splits) {}

  int replica_id_in_sync_group() const noexcept override { return id_; }
  int num_replicas_in_sync() const noexcept override { return n_; }

  void all_reduce(ReduceOp op, Tensor& t) override {
    STRATA_CHECK(t.defined() && t.is_contiguous(), "all_reduce needs a defined, contiguous tensor");
    for (GradientEngine<C>* e : engines_) e->drain();  // after the gradient buckets in flight
    comm_.allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
  }

 private:
  bool aggregate(Gradients g, double) override {
    for (GradientEngine<C>* e : engines_)
      if (e->owns(g)) {
        e->finish();
        local_nonfinite_ = e->local_nonfinite();
        return true;
      }
    STRATA_CHECK(sync_, "apply_gradients inside NoSync: the gradients would stay local to each replica");
    NonfiniteWatch watch;
    const bool check = NonfiniteWatch::wanted();
    for (std::size_t i = 0; i < g.size(); ++i) {
      Tensor t = g[i];
      if (check) watch.note(i, t);
      all_reduce(ReduceOp::Sum, t);
    }
    local_nonfinite_ = watch.first();
    return true;
  }
  std::int64_t local_nonfinite_parameter() const override { return local_nonfinite_; }

  // A split update where the gradients are those of a model with a PartitionedUpdate and the
  // optimizer can update ranges; every replica updates all of its copy otherwise.
  UpdateLayout layout(const Gradients& g, optim::Optimizer& opt) override {
    if (opt.updates_ranges())
      for (std::size_t i = 0; i < splits_.size(); ++i)
        if (splits_[i] && engines_[i]->owns(g)) {
          pending_ = splits_[i];
          return pending_->begin(id_, opt) ? UpdateLayout::share(pending_->ranges(id_, opt)) : UpdateLayout::whole();
        }
    return UpdateLayout::whole();
  }
  void publish() override {
    bool published = false;
    if (PartitionedUpdate* split = std::exchange(pending_, nullptr)) {
      if (split->splitting(id_)) {
        split->publish(id_);
        split->end(id_);
        if (!split->barrier()) comm_.barrier();  // every copy whole before any replica goes on
        published = true;
      } else {
        split->end(id_);  // this step every replica updated all of its copy
      }
    }
    // Sharded gradients: a replica writes its buffers again in its next backward, so none goes
    // on before all are done reading them; the split's barrier above does that where it ran.
    bool sharded = false;
    for (GradientEngine<C>* e : engines_)
      if (e->sharded_step()) {
        sharded = true;
        e->consume();
      }
    if (sharded && !published) comm_.barrier();
  }

  void set_gradient_sync(bool on) override {
    sync_ = on;
    for (GradientEngine<C>* e : engines_) e->set_sync(on);
  }

  C& comm_;
  int id_, n_;
  std::span<GradientEngine<C>* const> engines_;
  std::span<PartitionedUpdate* const> splits_;
  PartitionedUpdate* pending_ = nullptr;  // the split update this step's apply_gradients runs
  bool sync_ = true;
  std::int64_t local_nonfinite_ = -1;  // this replica's first non-finite gradient this step
};

}  // namespace strata::detail

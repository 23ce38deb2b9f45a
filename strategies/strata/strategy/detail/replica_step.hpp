/// \file
/// ReplicaStep: what a strategy supplies, per replica, to the update protocol
/// (Optimizer::run_update over optim::UpdateStages) — how this replica's gradients are
/// aggregated (stage 1), how its update is laid out (stage 3), how the new values reach the
/// other replicas (stage 4) — and what every strategy's replicas share: where non-finite
/// gradients came from and the barrier after reading shares, both through the replica's
/// context, and the stages' timeline events. Users never see it: their lambdas get the
/// ReplicaContext, which points to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <strata/observe/timeline.hpp>
#include <strata/optim/update_stages.hpp>

namespace strata {
class ReplicaContext;
}  // namespace strata

namespace strata::detail {

using UpdateLayout = optim::UpdateLayout;

/// One replica's side of a strategy's step. A strategy's context class implements it beside
/// ReplicaContext (whose constructor ties the two); the protocol calls its stages in order,
/// once per apply_gradients.
class ReplicaStep : public optim::UpdateStages {
 public:
  /// Under NonFinite::error: the index of this replica's first parameter whose own gradient
  /// (before the sum) held a NaN or Inf this step, -1 if none, -2 if this strategy cannot tell
  /// (then the error names no replica). A strategy that tells lets every replica take part in
  /// ReplicaContext::all_reduce when the summed gradients are non-finite.
  virtual std::int64_t local_nonfinite_parameter() const { return -2; }

  /// The lowest replica whose own gradients held a NaN or Inf, then that replica's first such
  /// parameter, from two small all-reduces in which every replica takes part; "" where the
  /// strategy cannot tell (replica_context.hpp).
  std::string nonfinite_origin() override;
  /// An all-reduce of one word: the barrier after the replicas read each other's shares.
  void shares_read() override;

  void stage_begins(optim::UpdateStage s) override {
    if (s == optim::UpdateStage::aggregate)
      event_.emplace("aggregate gradients", "communication");
    else
      event_.emplace("optimizer step", "compute");
  }
  void stage_ends(optim::UpdateStage) override { event_.reset(); }

 protected:
  ReplicaStep() = default;
  // Bound to one context (context_): a copy would lose or share the binding.
  ReplicaStep(const ReplicaStep&) = delete;
  ReplicaStep& operator=(const ReplicaStep&) = delete;
  ~ReplicaStep() = default;

 private:
  friend class strata::ReplicaContext;
  ReplicaContext* context_ = nullptr;       // set by the ReplicaContext it stands behind
  std::optional<observe::ScopedEvent> event_;  // the stage under way
};

}  // namespace strata::detail

/// \file
/// ReplicaStep: what a strategy supplies, per replica, to the update protocol
/// (update_protocol.hpp) — how this replica's gradients are aggregated (stage 1), how its
/// update is laid out (stage 3), and how the new values reach the other replicas (stage 4).
/// Users never see it: their lambdas get the ReplicaContext, which points to it.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/autograd/backward.hpp>  // Gradients
#include <strata/optim/optimizer.hpp>    // Optimizer, ElementRange

namespace strata::detail {

/// How this replica applies the optimizer's rule in a step (stage 3 of the protocol).
struct UpdateLayout {
  enum class Way {
    whole,     ///< the whole of every parameter (its own copy)
    ranges,    ///< `ranges` of each parameter: its share of a split update
    elsewhere  ///< nothing: another replica updates the variables this one shares
  };
  Way way = Way::whole;
  const std::vector<optim::ElementRange>* ranges = nullptr;  // Way::ranges only

  static UpdateLayout whole() { return {}; }
  static UpdateLayout share(const std::vector<optim::ElementRange>& r) { return {Way::ranges, &r}; }
  static UpdateLayout elsewhere() { return {Way::elsewhere, nullptr}; }
};

/// One replica's side of a strategy's step. A strategy's context class implements it beside
/// ReplicaContext; the protocol calls its stages in order, once per apply_gradients.
class ReplicaStep {
 public:
  /// Stage 1: sums `g` over every replica in sync, in place. `lr`: the learning rate the
  /// update is about to apply (a strategy that updates elsewhere, on parameter servers,
  /// passes it on). False where the update already happened elsewhere and this replica's
  /// parameters hold its result (then stages 2 and 3 do not run here).
  virtual bool aggregate(Gradients g, double lr) = 0;

  /// Under NonFinite::error: the index of this replica's first parameter whose own gradient
  /// (before the sum) held a NaN or Inf this step, -1 if none, -2 if this strategy cannot tell
  /// (then the error names no replica). A strategy that tells lets every replica take part in
  /// ReplicaContext::all_reduce when the summed gradients are non-finite.
  virtual std::int64_t local_nonfinite_parameter() const { return -2; }

  /// Whether stage 3 happens off this replica (on parameter servers), so that stage 2's
  /// gradient transforms cannot run here.
  virtual bool updates_elsewhere() const { return false; }
  /// Where stage 3 happens elsewhere: whether it applies the optimizer's lazy rule to
  /// row-sparse tables (the sparse parameter server, which updates them by rows).
  virtual bool updates_rows_elsewhere() const { return false; }
  /// Before stage 1: the optimizer whose update this is (its rule on row-sparse tables
  /// travels with the gradients where the update runs elsewhere).
  virtual void note_optimizer(const optim::Optimizer& opt) { (void)opt; }

  /// Stage 3: how this replica applies `opt`'s rule to `g` (already aggregated and
  /// transformed). The default: every replica updates the whole of its own copy.
  virtual UpdateLayout layout(const Gradients& g, optim::Optimizer& opt) {
    (void)g, (void)opt;
    return UpdateLayout::whole();
  }

  /// Stage 4, after every apply_gradients (updated here or not): makes the new values visible
  /// to every replica that reads them.
  virtual void publish() {}

  /// While off, backward passes leave gradients local (NoSync: gradient accumulation).
  virtual void set_gradient_sync(bool on) { (void)on; }

 protected:
  ReplicaStep() = default;
  ReplicaStep(const ReplicaStep&) = default;
  ReplicaStep& operator=(const ReplicaStep&) = default;
  ~ReplicaStep() = default;
};

}  // namespace strata::detail

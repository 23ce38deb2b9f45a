/// \file
/// SplitUpdate: the optimizer update of one model's mirrored copies in one process
/// (MirroredStrategy's CPU replica threads), split across the replicas. After the all-reduce
/// every replica holds the same summed gradients, and would apply the same update to its own
/// copy: N times the same memory-bound pass. Instead replica r updates only its share of each
/// parameter (the share of each bucket it reduced, so the summed gradient is still in its
/// cache), writes the new values of that share into the other copies, and keeps the optimizer
/// state of that share; a barrier then makes every copy whole before any replica reads it.
/// The replicas' optimizers share one set of state tensors, each updating its own ranges of
/// them, so state() of any replica is complete: what a checkpoint saves. Gradients are not
/// touched: every replica still holds the whole sum (docs/performance.md).
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include <strata/observe/timeline.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/runtime/process.hpp>  // env, env_int
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

/// STRATA_SPLIT_UPDATE (0 or 1) if set, else true: whether MirroredStrategy splits the
/// optimizer update across its replicas (MirroredOptions::split_update).
inline bool default_split_update() {
  const char* v = runtime::detail::env("STRATA_SPLIT_UPDATE");
  return v == nullptr || runtime::detail::env_int("STRATA_SPLIT_UPDATE", v, 0, 1) == 1;
}

}  // namespace strata

namespace strata::detail {

class SplitUpdate {
 public:
  /// copies[r]: replica r's parameters; shares[r][k]: the elements of parameter k replica r
  /// updates (the shares of one parameter are disjoint and cover it).
  SplitUpdate(std::vector<std::vector<Tensor>> copies, std::vector<std::vector<optim::ElementRange>> shares)
      : copies_(std::move(copies)), shares_(std::move(shares)), optimizers_(copies_.size(), nullptr),
        shared_at_(copies_.size(), {~std::uint64_t{0}, ~std::uint64_t{0}}) {
    STRATA_CHECK(copies_.size() == shares_.size() && !copies_.empty(), "SplitUpdate: one share per copy");
    for (std::size_t r = 0; r < copies_.size(); ++r) {
      STRATA_CHECK(copies_[r].size() == copies_[0].size() && shares_[r].size() == copies_[0].size(),
                   "SplitUpdate: replica ", r, " has another parameter list");
      for (const Tensor& p : copies_[r])
        STRATA_CHECK(p.device().kind == DeviceKind::cpu && p.is_contiguous(), "SplitUpdate: parameters on the host");
    }
  }

  /// Replica r's ranges, for `opt`, its optimizer over its copy.
  const std::vector<optim::ElementRange>& ranges(int r, optim::Optimizer& opt) {
    optimizers_[index(r)] = &opt;
    return shares_[index(r)];
  }

  /// After every replica has updated its ranges (a barrier): copies the other replicas'
  /// ranges into replica r's copy. Reading them (pulling) rather than writing them into the
  /// other copies leaves each copy's lines in the cache of the replica that reads it next.
  /// The caller waits for every replica's pull (a second barrier) before it goes on.
  void pull(int r) {
    observe::ScopedEvent ev("pull update", "communication");
    const std::size_t me = index(r);
    for (std::size_t s = 0; s < copies_.size(); ++s) {
      if (s == me) continue;
      for (std::size_t k = 0; k < copies_[me].size(); ++k) {
        const optim::ElementRange range = shares_[s][k];
        if (range.end <= range.begin) continue;
        const std::size_t es = size_of(copies_[me][k].dtype());
        const std::size_t offset = static_cast<std::size_t>(range.begin) * es;
        std::memcpy(static_cast<char*>(copies_[me][k].raw_data()) + offset,
                    static_cast<const char*>(copies_[s][k].raw_data()) + offset,
                    static_cast<std::size_t>(range.end - range.begin) * es);
      }
    }
  }

  /// After every replica has updated its ranges (a barrier): replica r's optimizer takes replica 0's
  /// state tensors, copying its ranges into them — once, and again whenever either side's
  /// state tensors were replaced (first use of a slot, load_state).
  void share_state(int r) {
    const std::size_t me = index(r);
    optim::Optimizer *mine = optimizers_[me], *owner = optimizers_[0];
    if (me == 0 || mine == nullptr || owner == nullptr) return;
    if (shared_at_[me] == std::pair(mine->state_version(), owner->state_version())) return;
    mine->share_state_from(*owner, shares_[me]);
    shared_at_[me] = {mine->state_version(), owner->state_version()};
  }

 private:
  std::size_t index(int r) const {
    STRATA_CHECK(r >= 0 && static_cast<std::size_t>(r) < copies_.size(), "SplitUpdate: replica ", r, " of ",
                 copies_.size());
    return static_cast<std::size_t>(r);
  }

  std::vector<std::vector<Tensor>> copies_;
  std::vector<std::vector<optim::ElementRange>> shares_;
  std::vector<optim::Optimizer*> optimizers_;  // each replica's, set by ranges() every step
  std::vector<std::pair<std::uint64_t, std::uint64_t>> shared_at_;  // state versions (own, replica 0's) last shared
};

}  // namespace strata::detail

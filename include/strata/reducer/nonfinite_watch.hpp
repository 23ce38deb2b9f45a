/// \file
/// NonfiniteWatch: under NonFinite::error, the first parameter whose own gradient (this
/// replica's, before the sum) held a NaN or Inf in a step. The strategy reports it to the
/// update protocol, which names the replica and parameter in its error.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include <strata/optim/nonfinite.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

class NonfiniteWatch {
 public:
  /// Whether any optimizer asks for the check (NonFinite::error); the watch costs nothing else.
  static bool wanted() noexcept { return optim::detail::local_nonfinite_checks().load(std::memory_order_relaxed); }

  void reset() noexcept { first_ = -1; }
  /// Looks at the gradients of the parameters `members` (indices into `params`) once they are final.
  template <class Members>
  void note(const std::vector<Tensor>& params, const Members& members) {
    for (std::size_t k : members)
      if ((first_ < 0 || static_cast<std::int64_t>(k) < first_) && !optim::all_finite(params[k].grad()))
        first_ = static_cast<std::int64_t>(k);
  }
  /// Parameter k's gradient `g`, before it is summed.
  void note(std::size_t k, const Tensor& g) {
    if ((first_ < 0 || static_cast<std::int64_t>(k) < first_) && g.defined() && !optim::all_finite(g))
      first_ = static_cast<std::int64_t>(k);
  }
  /// The lowest parameter index seen non-finite since reset(); -1 if none.
  std::int64_t first() const noexcept { return first_; }

 private:
  std::int64_t first_ = -1;
};

}  // namespace strata::detail

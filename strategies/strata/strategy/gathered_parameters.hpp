/// \file
/// gather_parameters(strategy, params): every parameter of a model whole on this process for
/// a scope, under any strategy. ShardedStrategy's stage 3 keeps only each rank's blocks of its
/// wrap units' parameters between their uses; a loop written for any strategy reads or writes
/// parameters outside a step (saving weights, printing them) inside this scope.
#pragma once

#include <concepts>
#include <functional>
#include <span>
#include <utility>

#include <strata/tensor/tensor.hpp>

namespace strata {

/// What gather_parameters returns: while it lives, every parameter of the model is whole on
/// this rank; values written to them meanwhile are kept (each rank keeps its block of them:
/// write the same on every rank). Under the stages that keep parameters whole, nothing.
class GatheredParameters {
 public:
  GatheredParameters() = default;
  explicit GatheredParameters(std::function<void()> release) : release_(std::move(release)) {}
  GatheredParameters(GatheredParameters&& o) noexcept : release_(std::exchange(o.release_, nullptr)) {}
  GatheredParameters& operator=(GatheredParameters&&) = delete;
  ~GatheredParameters() {
    if (release_) release_();
  }

 private:
  std::function<void()> release_;
};

/// Every parameter in `params` whole on this process while the returned object lives: under
/// ShardedStrategy's stage 3 each wrap unit gathered (a collective: every rank calls it);
/// under any other strategy, nothing to do. For reading or writing parameters outside a step
/// (saving weights, printing them) in a loop written for any strategy.
template <class S>
GatheredParameters gather_parameters(S& strategy, std::span<const Tensor> params) {
  if constexpr (requires { { strategy.gathered(params) } -> std::same_as<GatheredParameters>; })
    return strategy.gathered(params);
  else
    return {};
}

}  // namespace strata

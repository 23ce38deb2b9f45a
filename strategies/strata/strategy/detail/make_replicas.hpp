/// \file
/// One copy of a scoped object per local replica (what scope() returns under a strategy with
/// several replicas in one process), and the concepts that tell a model from other objects.
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/nn/init.hpp>  // default_generator
#include <strata/support/check.hpp>
#include <strata/support/replica_thread.hpp>  // ReplicaScope
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// Objects with a parameter list (modules): their copies are synchronised.
template <class T>
concept HasParameters = requires(const T& t) {
  { t.parameters() } -> std::convertible_to<const std::vector<Tensor>&>;
};

/// A model with buffers (batch norm's running statistics): they move with its parameters.
template <class T>
concept HasBuffers = requires(const T& t) {
  { t.buffers() } -> std::convertible_to<const std::vector<Tensor>&>;
};

/// `n` results of `factory`, the r-th made with replica r current (so a factory that reads a
/// Replicated object, like an optimizer over model.parameters(), reads replica r's copy).
/// Each call starts from the same state of the default generator, which ends where one call
/// would leave it; the copies' parameters are then set equal to replica 0's.
template <class F>
auto make_replicas(F& factory, int n) {
  using T = std::invoke_result_t<F&>;
  static_assert(std::is_object_v<T> && !std::is_const_v<T>, "scope(): the factory must return an object by value");
  std::vector<std::unique_ptr<T>> copies;
  const Generator start = default_generator();
  Generator after = start;
  for (int r = 0; r < n; ++r) {
    ReplicaScope scope(r);
    default_generator() = start;
    copies.push_back(std::make_unique<T>(factory()));
    if (r == 0) after = default_generator();
  }
  default_generator() = after;
  if constexpr (HasParameters<T>) {
    NoGradGuard no_grad;
    const std::vector<Tensor>& p0 = copies[0]->parameters();
    for (int r = 1; r < n; ++r) {
      const std::vector<Tensor>& pr = copies[static_cast<std::size_t>(r)]->parameters();
      STRATA_CHECK_EQ(pr.size(), p0.size(), "scope(): the factory made models with different parameter lists");
      for (std::size_t k = 0; k < p0.size(); ++k) {
        STRATA_CHECK(pr[k].shape() == p0[k].shape() && pr[k].dtype() == p0[k].dtype(),
                     "scope(): the factory made models with different parameter shapes");
        Tensor dst = pr[k];
        dst.copy_(p0[k]);
      }
    }
  }
  return copies;
}

}  // namespace strata::detail

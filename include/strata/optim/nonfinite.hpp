/// \file
/// Non-finite gradients: the policy (NonFinite), the finiteness scan, and the process-wide
/// switch that makes the gradient engines look at each replica's own gradients before they
/// are summed, so that NonFinite::error can name the replica a NaN or Inf came from.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include <strata/tensor/tensor.hpp>

namespace strata::optim {

/// What apply_gradients does with gradients holding NaN or Inf. The check reads the
/// aggregated gradients — the same bits on every replica of a synchronous strategy, since a
/// NaN or Inf on any replica carries through the sum — so all replicas decide alike without
/// another collective.
enum class NonFinite {
  apply,  ///< no check (the default): the update is applied as is
  skip,   ///< the step is skipped: parameters and state unchanged, skipped_steps() counts it
  error,  ///< data_error naming the first non-finite parameter gradient, and the replica it came from
};

/// True if every element of floating-point tensor `t` is finite (one pass, no early exit).
inline bool all_finite(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();  // a device's tensor: checked on a host copy
  return strata::detail::visit_floating(c.dtype(), "non-finite check", [&](auto tag) {
    using T = decltype(tag);
    const T* p = c.template data<T>();
    bool ok = true;
    for (std::int64_t k = 0, n = c.numel(); k < n; ++k) ok &= std::isfinite(p[k]);  // vectorises
    return ok;
  });
}

namespace detail {
/// On once any optimizer of this process asks for NonFinite::error: from then on each
/// replica notes its own first non-finite gradient before the sum (a pass over the gradients;
/// strict mode only).
inline std::atomic<bool>& local_nonfinite_checks() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace detail

}  // namespace strata::optim

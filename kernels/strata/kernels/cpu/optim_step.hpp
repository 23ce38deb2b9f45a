/// \file
/// Fused optimizer updates: one pass over parameter, gradient and state per step.
/// The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW), so trajectories can be compared.
#pragma once

#include <cstdint>

#include <strata/config.hpp>                // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked
#include <strata/kernels/math/optim.hpp>   // the element updates

namespace strata::kernels::cpu {

struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;  ///< the momentum buffer is initialised to the gradient on the first step
};

/// The per-step coefficients of sgd_step (shared with the CUDA kernel).
template <class T>
math::SgdCoeffs<T> sgd_coeffs(const SgdParams& o) noexcept {
  return {static_cast<T>(o.lr), static_cast<T>(o.momentum), static_cast<T>(o.weight_decay),
          static_cast<T>(1 - o.dampening), o.nesterov ? T(1) + static_cast<T>(o.momentum) : T(1)};
}

/// Which element update sgd_step runs for these options.
inline math::SgdVariant sgd_variant(const SgdParams& o) noexcept {
  if (o.momentum == 0) return math::SgdVariant::plain;
  if (o.first_step) return math::SgdVariant::first_momentum;
  return o.nesterov ? math::SgdVariant::nesterov : math::SgdVariant::momentum;
}

/// p -= lr * update, where update is g (+ wd*p), or its momentum buffer (Nesterov: g + mu*buf).
template <class T>
void sgd_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT buf,
              const SgdParams& o) {
  const auto c = sgd_coeffs<T>(o);
  using math::SgdVariant;
  // One loop per variant, so no branch sits inside the vectorised loop.
  switch (sgd_variant(o)) {
    case SgdVariant::plain:
      for_each_blocked(n, [&](std::int64_t i) {
        T unused{};
        math::sgd_update<SgdVariant::plain>(p[i], g[i], unused, c);
      });
      break;
    case SgdVariant::first_momentum:
      for_each_blocked(n, [&](std::int64_t i) { math::sgd_update<SgdVariant::first_momentum>(p[i], g[i], buf[i], c); });
      break;
    case SgdVariant::momentum:
      for_each_blocked(n, [&](std::int64_t i) { math::sgd_update<SgdVariant::momentum>(p[i], g[i], buf[i], c); });
      break;
    case SgdVariant::nesterov:
      for_each_blocked(n, [&](std::int64_t i) { math::sgd_update<SgdVariant::nesterov>(p[i], g[i], buf[i], c); });
      break;
  }
}

struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  ///< AdamW: decay the weights directly instead of adding wd*p to g
  std::int64_t step = 1;   ///< 1-based step number, for bias correction
};

template <class T>
math::AdamCoeffs<T> adam_coeffs(const AdamParams& o) {
  return math::AdamCoeffs<T>::make(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled, o.step);
}

template <class T>
void adam_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT m,
               T* STRATA_RESTRICT v, const AdamParams& o) {
  const auto c = adam_coeffs<T>(o);
  for_each_blocked(n, [&](std::int64_t i) { math::adam_update(p[i], g[i], m[i], v[i], c); });
}

}  // namespace strata::kernels::cpu

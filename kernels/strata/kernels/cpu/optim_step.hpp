/// \file
/// Fused optimizer updates: one pass over parameter, gradient and state per step.
/// The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW), so trajectories can be compared.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/config.hpp>                // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked

namespace strata::kernels::cpu {

struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;  ///< the momentum buffer is initialised to the gradient on the first step
};

/// p -= lr * update, where update is g (+ wd*p), or its momentum buffer (Nesterov: g + mu*buf).
template <class T>
void sgd_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT buf,
              const SgdParams& o) {
  const T lr = static_cast<T>(o.lr), mu = static_cast<T>(o.momentum), wd = static_cast<T>(o.weight_decay);
  const T damp = static_cast<T>(1 - o.dampening);
  // One loop body per case, so no branch sits inside the vectorised loop.
  auto run = [n](auto&& body) { for_each_blocked(n, body); };
  if (o.momentum == 0) {
    run([&](std::int64_t i) { p[i] -= lr * (g[i] + wd * p[i]); });
  } else if (o.first_step) {
    const T step_scale = o.nesterov ? T(1) + mu : T(1);
    run([&](std::int64_t i) {
      const T d = g[i] + wd * p[i];
      buf[i] = d;
      p[i] -= lr * step_scale * d;
    });
  } else if (o.nesterov) {
    run([&](std::int64_t i) {
      const T d = g[i] + wd * p[i];
      const T b = mu * buf[i] + damp * d;
      buf[i] = b;
      p[i] -= lr * (d + mu * b);
    });
  } else {
    run([&](std::int64_t i) {
      const T d = g[i] + wd * p[i];
      const T b = mu * buf[i] + damp * d;
      buf[i] = b;
      p[i] -= lr * b;
    });
  }
}

struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  ///< AdamW: decay the weights directly instead of adding wd*p to g
  std::int64_t step = 1;   ///< 1-based step number, for bias correction
};

template <class T>
void adam_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT m,
               T* STRATA_RESTRICT v, const AdamParams& o) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(o.step));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(o.step));
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T step_size = static_cast<T>(o.lr / bc1);
  const T inv_sqrt_bc2 = static_cast<T>(1 / std::sqrt(bc2));
  const T eps = static_cast<T>(o.eps), wd = static_cast<T>(o.weight_decay);
  const T decay = static_cast<T>(1 - o.lr * o.weight_decay);
  // Decoupled (AdamW) decay multiplies p by `decay`; L2 (Adam) adds wd * p to the gradient.
  const T pd = o.decoupled ? decay : T(1), gd = o.decoupled ? T(0) : wd;
  for_each_blocked(n, [&](std::int64_t i) {
    const T pi = p[i] * pd;
    const T d = g[i] + gd * p[i];
    const T mi = b1 * m[i] + (1 - b1) * d;
    const T vi = b2 * v[i] + (1 - b2) * d * d;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  });
}

}  // namespace strata::kernels::cpu

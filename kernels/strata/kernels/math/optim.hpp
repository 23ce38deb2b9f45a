/// \file
/// One element of the fused optimizer updates (PyTorch's formulas for SGD, Adam and AdamW),
/// shared by the CPU loop and the CUDA kernel. The per-step coefficients are computed once on
/// the host (SgdCoeffs / AdamCoeffs::make), so the element update holds no pow or branch on
/// the options beyond the compile-time variant.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/config.hpp>  // STRATA_HOST_DEVICE

namespace strata::kernels::math {

/// Which SGD update: no momentum; the first momentum step (the buffer starts as the
/// gradient); heavy-ball momentum; Nesterov momentum.
enum class SgdVariant { plain, first_momentum, momentum, nesterov };

template <class T>
struct SgdCoeffs {
  T lr, mu, wd, damp, first_scale;  ///< first_scale: 1 + mu for Nesterov's first step, else 1
};

template <SgdVariant V, class T>
STRATA_HOST_DEVICE void sgd_update(T& p, T g, T& buf, const SgdCoeffs<T>& c) noexcept {
  const T d = g + c.wd * p;
  if constexpr (V == SgdVariant::plain) {
    p -= c.lr * d;
  } else if constexpr (V == SgdVariant::first_momentum) {
    buf = d;
    p -= c.lr * c.first_scale * d;
  } else {
    const T b = c.mu * buf + c.damp * d;
    buf = b;
    if constexpr (V == SgdVariant::nesterov)
      p -= c.lr * (d + c.mu * b);
    else
      p -= c.lr * b;
  }
}

template <class T>
struct AdamCoeffs {
  T b1, b2, step_size, inv_sqrt_bc2, eps, pd, gd;  ///< pd: AdamW's weight decay factor; gd: Adam's L2 term

  static AdamCoeffs make(double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                         std::int64_t step) {
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
    const T decay = static_cast<T>(1 - lr * weight_decay);
    return {static_cast<T>(beta1),       static_cast<T>(beta2),
            static_cast<T>(lr / bc1),    static_cast<T>(1 / std::sqrt(bc2)),
            static_cast<T>(eps),         decoupled ? decay : T(1),
            decoupled ? T(0) : static_cast<T>(weight_decay)};
  }
};

template <class T>
STRATA_HOST_DEVICE void adam_update(T& p, T g, T& m, T& v, const AdamCoeffs<T>& c) noexcept {
  const T pi = p * c.pd;
  const T d = g + c.gd * p;
  const T mi = c.b1 * m + (1 - c.b1) * d;
  const T vi = c.b2 * v + (1 - c.b2) * d * d;
  m = mi;
  v = vi;
  p = pi - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
}

/// SGD options for one step (torch.optim.SGD's).
struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;  ///< the momentum buffer is initialised to the gradient on the first step
};

/// The per-step coefficients of sgd_step (shared with the CUDA kernel).
template <class T>
SgdCoeffs<T> sgd_coeffs(const SgdParams& o) noexcept {
  return {static_cast<T>(o.lr), static_cast<T>(o.momentum), static_cast<T>(o.weight_decay),
          static_cast<T>(1 - o.dampening), o.nesterov ? T(1) + static_cast<T>(o.momentum) : T(1)};
}

/// Which element update sgd_step runs for these options.
inline SgdVariant sgd_variant(const SgdParams& o) noexcept {
  if (o.momentum == 0) return SgdVariant::plain;
  if (o.first_step) return SgdVariant::first_momentum;
  return o.nesterov ? SgdVariant::nesterov : SgdVariant::momentum;
}

/// Adam and AdamW options for one step (torch.optim.Adam's and AdamW's).
struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  ///< AdamW: decay the weights directly instead of adding wd*p to g
  std::int64_t step = 1;   ///< 1-based step number, for bias correction
};

template <class T>
AdamCoeffs<T> adam_coeffs(const AdamParams& o) {
  return AdamCoeffs<T>::make(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled, o.step);
}

}  // namespace strata::kernels::math

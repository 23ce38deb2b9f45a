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

}  // namespace strata::kernels::math

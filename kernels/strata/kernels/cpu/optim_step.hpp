/// \file
/// Fused optimizer updates: one pass over parameter, gradient and state per step.
/// The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW), so trajectories can be compared.
#pragma once

#include <algorithm>
#include <cstdint>

#include <strata/config.hpp>                // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked
#include <strata/kernels/math/optim.hpp>   // the element updates, the options and coefficients

namespace strata::kernels::cpu {

// The options and their per-step coefficients are device-neutral (kernels/math/optim.hpp).
using math::AdamParams;
using math::SgdParams;
using math::adam_coeffs;
using math::sgd_coeffs;
using math::sgd_variant;


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

template <class T>
void adam_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT m,
               T* STRATA_RESTRICT v, const AdamParams& o) {
  const auto c = adam_coeffs<T>(o);
  for_each_blocked(n, [&](std::int64_t i) { math::adam_update(p[i], g[i], m[i], v[i], c); });
}

// The lazy sparse forms (docs/sparse_design.md): rows[0..k) of a [V, width] parameter and
// its state, each from its gradient row g + j * width; a row whose gradient is all zero is
// left as it is, state included. Only elements [lo, hi) of the parameter are written (a
// replica's share under a split update; a row cut by it is kept or skipped by its whole
// gradient row, so the replicas sharing it decide alike).

template <class T>
bool all_zero(std::int64_t n, const T* g) {
  bool zero = true;
  for (std::int64_t i = 0; i < n; ++i) zero &= g[i] == T(0);  // vectorises
  return zero;
}

template <class T>
void sgd_rows(std::int64_t k, std::int64_t width, const std::int64_t* rows, const T* g, T* p, T* buf,
              const SgdParams& o, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t row = rows[j] * width, at = std::max(row, lo), end = std::min(row + width, hi);
    const T* gr = g + j * width;
    if (end <= at || all_zero(width, gr)) continue;
    sgd_step<T>(end - at, p + at, gr + (at - row), buf ? buf + at : nullptr, o);
  }
}

template <class T>
void adam_rows(std::int64_t k, std::int64_t width, const std::int64_t* rows, const T* g, T* p, T* m, T* v,
               const AdamParams& o, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t row = rows[j] * width, at = std::max(row, lo), end = std::min(row + width, hi);
    const T* gr = g + j * width;
    if (end <= at || all_zero(width, gr)) continue;
    adam_step<T>(end - at, p + at, gr + (at - row), m + at, v + at, o);
  }
}

}  // namespace strata::kernels::cpu

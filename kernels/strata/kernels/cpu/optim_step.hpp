/// \file
/// Fused optimizer updates: one pass over parameter, gradient and state per step.
/// The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW), so trajectories can be compared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>  // std::is_same_v

#include <strata/config.hpp>                // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked
#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f
#include <strata/kernels/math/optim.hpp>   // the element updates, the options and coefficients

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_OPTIM_AVX512 1
#include <immintrin.h>
#endif

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

#ifdef STRATA_OPTIM_AVX512
namespace detail {
/// math::adam_update over packs of 16 floats while a whole pack fits; returns where it stopped.
/// The same operations in the same order, without FMA (contraction off: GCC would fuse the
/// products and sums), so every element is bit-identical to the scalar form, which a split
/// update's shares may end in anywhere. The scalar loop does not vectorise: std::sqrt may set
/// errno.
#if defined(__clang__)
[[gnu::target("avx512f")]]
#else
[[gnu::target("avx512f"), gnu::optimize("fp-contract=off")]]
#endif
inline std::int64_t adam_step_avx512(std::int64_t n, float* p, const float* g, float* m,
                                                                float* v, const math::AdamCoeffs<float>& c) {
  const __m512 b1 = _mm512_set1_ps(c.b1), b2 = _mm512_set1_ps(c.b2), one_b1 = _mm512_set1_ps(1 - c.b1),
               one_b2 = _mm512_set1_ps(1 - c.b2), step = _mm512_set1_ps(c.step_size),
               inv_bc2 = _mm512_set1_ps(c.inv_sqrt_bc2), eps = _mm512_set1_ps(c.eps), pd = _mm512_set1_ps(c.pd),
               gd = _mm512_set1_ps(c.gd);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const __m512 pv = _mm512_loadu_ps(p + i), gv = _mm512_loadu_ps(g + i);
    const __m512 pi = _mm512_mul_ps(pv, pd);
    const __m512 d = _mm512_add_ps(gv, _mm512_mul_ps(gd, pv));
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(one_b1, d));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(one_b2, d), d));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    // (maskz: GCC 12 warns of _mm512_sqrt_ps's undefined pass-through operand)
    const __m512 den = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_sqrt_ps(0xffff, vi), inv_bc2), eps);
    _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_div_ps(_mm512_mul_ps(step, mi), den)));
  }
  return i;
}
}  // namespace detail
#endif

template <class T>
void adam_step(std::int64_t n, T* STRATA_RESTRICT p, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT m,
               T* STRATA_RESTRICT v, const AdamParams& o) {
  const auto c = adam_coeffs<T>(o);
  std::int64_t i = 0;
#ifdef STRATA_OPTIM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) i = detail::adam_step_avx512(n, p, g, m, v, c);
#endif
  for_each_blocked(n - i, [&](std::int64_t j) { math::adam_update(p[i + j], g[i + j], m[i + j], v[i + j], c); });
}

// The lazy sparse forms (docs/design/sparse_tables.md): rows[0..k) of a [V, width] parameter and
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

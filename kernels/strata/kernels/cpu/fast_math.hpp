/// \file
/// exp and GELU for float32 passes, written as straight-line arithmetic that GCC and clang
/// vectorise (std::exp and std::erf are scalar calls at -O2: GELU spent 10 ns per value, a
/// fifth of the character Transformer's step). float keeps float32 accuracy (exp within
/// 2e-7 relative, the normal CDF within 1e-5 relative down to x = -9, tests/kernels/
/// test_fast_math.cpp); double calls the standard library's, so the float64 gradient checks
/// see the exact forms.
#pragma once

#include <bit>  // std::bit_cast
#include <cmath>
#include <cstdint>
#include <type_traits>  // std::is_same_v

#include <strata/config.hpp>              // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked

namespace strata::kernels::cpu {

/// e^x for finite x <= 88: Cephes' expf (x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial
/// for e^r, 2^n put into the exponent); 0 where 2^n is below float's smallest normal
/// (x < -87.3); NaN for infinite or NaN x. (No select on x: one kept GCC from vectorising.)
template <class T>
inline T fast_exp(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::exp(x);
  } else {
    // n = round(x / ln2) twice: as a float, and as the integer in the low mantissa bits of
    // x / ln2 + 1.5 * 2^23 (no float-to-int conversion: out of range it would be undefined).
    const float shifter = 12582912.0f, v = x * 1.44269504088896341f + shifter;
    const float n = v - shifter;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    std::int32_t bits = std::bit_cast<std::int32_t>(v) - std::bit_cast<std::int32_t>(shifter) + 127;
    bits = bits < 0 ? 0 : bits;
    return e * std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 23);
  }
}

/// Φ(x), the standard normal CDF, and φ(x) = e^{-x²/2} / √(2π), both at once: Φ through
/// erfc's Chebyshev fit (Numerical Recipes' erfcc, relative error below 1.2e-7 everywhere),
/// so Φ keeps its relative accuracy far into the negative tail.
template <class T>
inline void normal_cdf_pdf(T x, T& cdf, T& pdf) {
  if constexpr (!std::is_same_v<T, float>) {
    cdf = T(0.5) * std::erfc(-x * T(0.70710678118654752440));
    pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
  } else {
    const float z = x * 0.70710678118654752440f, a = std::fabs(z);
    const float t = 1.0f / (1.0f + 0.5f * a);
    float q = 0.17087277f;
    q = q * t - 0.82215223f;
    q = q * t + 1.48851587f;
    q = q * t - 1.13520398f;
    q = q * t + 0.27886807f;
    q = q * t - 0.18628806f;
    q = q * t + 0.09678418f;
    q = q * t + 0.37409196f;
    q = q * t + 1.00002368f;
    q = q * t - 1.26551223f;
    const float e = fast_exp(-a * a);           // e^{-z²} = e^{-x²/2}
    const float half_erfc = 0.5f * t * e * fast_exp(q);  // erfc(a) = t e^{-a² + q(t)}
    // cdf = z < 0 ? half_erfc : 1 - half_erfc, picked by the sign bit (a float select here kept
    // GCC from vectorising the loop)
    const std::uint32_t negative = 0u - (std::bit_cast<std::uint32_t>(z) >> 31);
    cdf = std::bit_cast<float>((std::bit_cast<std::uint32_t>(half_erfc) & negative) |
                               (std::bit_cast<std::uint32_t>(1.0f - half_erfc) & ~negative));
    pdf = 0.39894228040143267794f * e;
  }
}

/// y = x Φ(x): GELU, its exact (erf) form.
template <class T>
void gelu_forward(std::int64_t n, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT y) {
  for_each_blocked(n, [&](std::int64_t i) {
    T cdf, pdf;
    normal_cdf_pdf(x[i], cdf, pdf);
    y[i] = x[i] * cdf;
  });
}

/// dx (+)= dy (Φ(x) + x φ(x)).
template <class T>
void gelu_backward(std::int64_t n, const T* STRATA_RESTRICT x, const T* STRATA_RESTRICT dy, T* STRATA_RESTRICT dx,
                   bool accumulate) {
  const auto grad = [&](std::int64_t i) {
    T cdf, pdf;
    normal_cdf_pdf(x[i], cdf, pdf);
    return dy[i] * (cdf + x[i] * pdf);
  };
  if (accumulate)
    for_each_blocked(n, [&](std::int64_t i) { dx[i] += grad(i); });
  else
    for_each_blocked(n, [&](std::int64_t i) { dx[i] = grad(i); });
}

}  // namespace strata::kernels::cpu

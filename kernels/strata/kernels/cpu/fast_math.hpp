/// \file
/// exp and GELU for float32 passes, four values at a time through GCC/clang vector types
/// (std::exp and std::erf are scalar calls: GELU had spent 10 ns per value, a fifth of the
/// character Transformer's step). The formulas are written once, for a float or a pack of
/// four; float keeps float32 accuracy (exp within 2e-7 relative, the normal CDF within 1e-5
/// relative down to x = -9: tests/kernels/test_fast_math.cpp). double calls the standard
/// library's functions, so the float64 gradient checks see the exact forms.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>      // std::memcpy: unaligned packs
#include <type_traits>  // std::is_same_v

#include <strata/config.hpp>  // STRATA_RESTRICT
#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_FLOAT_PACKS 1
#if defined(__x86_64__)
#include <immintrin.h>  // the AVX-512 loops' masked loads and stores
#endif
#endif

namespace strata::kernels::cpu {

namespace detail {

#ifdef STRATA_FLOAT_PACKS
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));
#if defined(__x86_64__) && !defined(__AVX2__)
// Packs of 8 for the loops compiled for AVX2 + FMA and picked at run time (avx2_with_fma).
#define STRATA_AVX2_PACKS 1
using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = std::int32_t __attribute__((vector_size(32)));
#endif
#if defined(__x86_64__) && !defined(__AVX512F__)
// Packs of 16 for the loops compiled for AVX-512 F and picked at run time (avx512f_runs).
#define STRATA_AVX512_PACKS 1
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));
#endif
#endif

/// The integer type of the same shape as V (float or a pack of four).
template <class V>
struct int_of {
  using type = std::int32_t;
};
#ifdef STRATA_FLOAT_PACKS
template <>
struct int_of<f32x4> {
  using type = i32x4;
};
#endif
#ifdef STRATA_AVX2_PACKS
template <>
struct int_of<f32x8> {
  using type = i32x8;
};
/// Whether this CPU runs AVX2 and FMA (asked once).
inline bool avx2_with_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif
#ifdef STRATA_AVX512_PACKS
template <>
struct int_of<f32x16> {
  using type = i32x16;
};
inline bool avx512f_runs() { return has_avx512f(); }
#endif
// (__builtin_bit_cast, not std::bit_cast: an instantiation of the latter would be a function
// taking and returning packs by value.)

// The helpers take and give packs through references: a pack of 8 by value would fall under
// the AVX calling convention in code not compiled for AVX (-Wpsabi), though they are always
// inlined into the AVX2 loops.

/// out = z < 0 ? a : b, lane by lane (a mask on packs: GCC keeps a float select a branch).
template <class V>
[[gnu::always_inline]] inline void select_negative(const V& z, const V& a, const V& b, V& out) {
  if constexpr (std::is_same_v<V, float>) {
    out = z < 0.0f ? a : b;
  } else {
    using I = typename int_of<V>::type;
    const I m = z < 0.0f;
    out = __builtin_bit_cast(V, (__builtin_bit_cast(I, a) & m) | (__builtin_bit_cast(I, b) & ~m));
  }
}

/// out = min(|x|, cap) for a cap >= 0, a NaN giving cap: one integer min of the bits (those of
/// non-negative floats are ordered as their values).
template <class V>
[[gnu::always_inline]] inline void magnitude_capped(const V& x, float cap, V& out) {
  using I = typename int_of<V>::type;
  const I bits = __builtin_bit_cast(I, x) & 0x7fffffff;
  const I limit = I{} + __builtin_bit_cast(std::int32_t, cap);
  out = __builtin_bit_cast(V, bits < limit ? bits : limit);
}

/// out = e^x, Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for e^r, and
/// 2^n put into the exponent, n read from the low mantissa bits of x / ln2 + 1.5 * 2^23 (no
/// float-to-int conversion, undefined out of range). For finite x <= 88; 0 below -87.3 (2^n
/// under float's smallest normal); NaN for infinite or NaN x. The polynomials here are taken
/// by Estrin's scheme (pairs of terms at once, then powers of r²): a pass of GELU or softmax
/// is one long chain of dependent steps per pack, and Horner's form made it 9 + 5 FMAs deep
/// (GELU's forward 16 % faster with 4 + 3).
template <class V>
[[gnu::always_inline]] inline void exp_of(const V& x, V& out) {
  using I = typename int_of<V>::type;
  const float shifter = 12582912.0f;
  const V v = x * 1.44269504088896341f + shifter;
  const V n = v - shifter;
  V r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const V r2 = r * r;
  const V p01 = r * 1.6666665459e-1f + 5.0000001201e-1f, p23 = r * 8.3334519073e-3f + 4.1665795894e-2f,
          p45 = r * 1.9875691500e-4f + 1.3981999507e-3f;
  const V p = (p45 * r2 + p23) * r2 + p01;
  const V e = p * r2 + r + 1.0f;
  I bits = __builtin_bit_cast(I, v) - __builtin_bit_cast(std::int32_t, shifter) + 127;
  bits &= ~(bits >> 31);  // 0 where negative (an arithmetic shift: all ones)
  out = e * __builtin_bit_cast(V, bits << 23);
}

/// erfc's Chebyshev fit, erfc(a) = t e^{-a² + q(t)} with t = 1 / (1 + a / 2) (Numerical
/// Recipes' erfcc, relative error below 1.2e-7), so Φ keeps its relative accuracy far into
/// the negative tail: sets z = x / √2, t and -a² + q(t).
template <class V>
[[gnu::always_inline]] inline void erfc_fit(const V& x, V& z, V& t, V& exponent) {
  z = x * 0.70710678118654752440f;
  V a;
  magnitude_capped(z, 10.0f, a);  // erfc(10) is below float's subnormals; a² stays finite
  t = 1.0f / (a * 0.5f + 1.0f);
  // the fit's degree-9 polynomial by Estrin's scheme (4 steps deep, not 9)
  const V t2 = t * t, t4 = t2 * t2;
  const V p01 = t * 1.00002368f - 1.26551223f, p23 = t * 0.09678418f + 0.37409196f,
          p45 = t * 0.27886807f - 0.18628806f, p67 = t * 1.48851587f - 1.13520398f, p89 = t * 0.17087277f - 0.82215223f;
  const V p0123 = p23 * t2 + p01, p4567 = p67 * t2 + p45;
  exponent = (p89 * t4 + p4567) * t4 + p0123 - a * a;
}

/// Φ(x), the standard normal CDF: one exp.
template <class V>
[[gnu::always_inline]] inline void normal_cdf(const V& x, V& cdf) {
  V z, t, exponent, e;
  erfc_fit(x, z, t, exponent);
  exp_of(exponent, e);
  const V half_erfc = t * e * 0.5f;
  select_negative(z, half_erfc, V(1.0f - half_erfc), cdf);
}

/// out = e^{s (x - m)} with -inf (and anything below -87.3) giving 0, and sum += out.
template <class V>
[[gnu::always_inline]] inline void exp_shifted(const V& x, float s, float m, V& out, V& sum) {
  using I = typename int_of<V>::type;
  const V v = (x - m) * s;
  const V lo = V{} - 87.3f;  // (a pack of -87.3, or the float)
  V clamped;
  select_negative(V(v - lo), lo, v, clamped);  // max(v, -87.3); NaN stays NaN
  exp_of(clamped, out);
  if constexpr (std::is_same_v<V, float>) {
    out = v < -87.3f ? 0.0f : out;
  } else {
    const I below = v < lo;
    out = __builtin_bit_cast(V, __builtin_bit_cast(I, out) & ~below);
  }
  sum += out;
}

/// y[i] = e^{s (x[i] - m)} over packs of V from i while a whole pack fits; sum += the values.
template <class V>
[[gnu::always_inline]] inline std::int64_t exp_shifted_packs(std::int64_t i, std::int64_t n, const float* STRATA_RESTRICT x,
                                                              float s, float m, float* STRATA_RESTRICT y, float& sum) {
  constexpr std::int64_t kWidth = sizeof(V) / sizeof(float);
  V acc = V{} + 0.0f;
  for (; i + kWidth <= n; i += kWidth) {
    V v, e;
    std::memcpy(&v, x + i, sizeof v);
    exp_shifted(v, s, m, e, acc);
    std::memcpy(y + i, &e, sizeof e);
  }
  if constexpr (std::is_same_v<V, float>) {
    sum += acc;
  } else {
    for (std::int64_t j = 0; j < kWidth; ++j) sum += acc[j];
  }
  return i;
}

/// GELU's passes over packs of V from index i while a whole pack fits; return where they stop.
template <class V>
[[gnu::always_inline]] inline std::int64_t gelu_forward_packs(std::int64_t i, std::int64_t n, const float* STRATA_RESTRICT x,
                                                               float* STRATA_RESTRICT y) {
  constexpr std::int64_t kWidth = sizeof(V) / sizeof(float);
  for (; i + kWidth <= n; i += kWidth) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    V cdf;
    normal_cdf(v, cdf);
    v *= cdf;
    std::memcpy(y + i, &v, sizeof v);
  }
  return i;
}

/// The backward reads Φ(x) back from the forward's y = x Φ(x) as y / x: one division in place
/// of the erfc fit and its exp (the forward's Φ within 2 ulp wherever y is a normal float, down
/// to x = -13, where both terms of the derivative are below 1e-36), 1/2 where |x| < 1e-30 (a
/// quotient of zeros or of subnormals there; Φ(x) rounds to 1/2). One exp is left: φ(x).
template <class V>
[[gnu::always_inline]] inline std::int64_t gelu_backward_packs(std::int64_t i, std::int64_t n, const float* STRATA_RESTRICT x,
                                                                const float* STRATA_RESTRICT y,
                                                                const float* STRATA_RESTRICT dy, float* STRATA_RESTRICT dx,
                                                                bool accumulate) {
  using I = typename int_of<V>::type;
  constexpr std::int64_t kWidth = sizeof(V) / sizeof(float);
  const V half = V{} + 0.5f;
  for (; i + kWidth <= n; i += kWidth) {
    V v, out, g, pdf;
    std::memcpy(&v, x + i, sizeof v);
    std::memcpy(&out, y + i, sizeof out);
    std::memcpy(&g, dy + i, sizeof g);
    V cdf = out / v;
    const V magnitude = __builtin_bit_cast(V, __builtin_bit_cast(I, v) & 0x7fffffff);
    select_negative(V(magnitude - 1e-30f), half, cdf, cdf);
    V a;
    magnitude_capped(v, 14.0f, a);  // φ(14) is below float's subnormals; a² stays finite
    exp_of(V(a * a * -0.5f), pdf);
    g *= cdf + v * pdf * 0.39894228040143267794f;
    if (accumulate) {
      V d;
      std::memcpy(&d, dx + i, sizeof d);
      g += d;
    }
    std::memcpy(dx + i, &g, sizeof g);
  }
  return i;
}

#ifdef STRATA_AVX2_PACKS
__attribute__((target("avx2,fma"))) inline std::int64_t exp_shifted_avx2(std::int64_t n, const float* x, float s, float m,
                                                                        float* y, float& sum) {
  return exp_shifted_packs<f32x8>(0, n, x, s, m, y, sum);
}
__attribute__((target("avx2,fma"))) inline std::int64_t gelu_forward_avx2(std::int64_t n, const float* x, float* y) {
  return gelu_forward_packs<f32x8>(0, n, x, y);
}
__attribute__((target("avx2,fma"))) inline std::int64_t gelu_backward_avx2(std::int64_t n, const float* x, const float* y,
                                                                          const float* dy, float* dx, bool accumulate) {
  return gelu_backward_packs<f32x8>(0, n, x, y, dy, dx, accumulate);
}
#endif

#ifdef STRATA_AVX512_PACKS
/// Every value, the last ones as one pack under a mask (its lanes past n read -inf, giving 0):
/// a softmax row of attention is short, and tails of 4s and single values cost more than the
/// packs of 16.
__attribute__((target("avx512f"))) inline std::int64_t exp_shifted_avx512(std::int64_t n, const float* x, float s,
                                                                         float m, float* y, float& sum) {
  const std::int64_t i = exp_shifted_packs<f32x16>(0, n, x, s, m, y, sum);
  if (i == n) return n;
  const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1);
  const f32x16 v = __builtin_bit_cast(f32x16, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, x + i));
  f32x16 e, acc = f32x16{} + 0.0f;
  exp_shifted(v, s, m, e, acc);
  _mm512_mask_storeu_ps(y + i, tail, __builtin_bit_cast(__m512, e));
  for (int j = 0; j < 16; ++j) sum += acc[j];
  return n;
}
/// The largest of x[0, n), n > 0 (a NaN after x[0] is passed over, as the scalar loop does).
__attribute__((target("avx512f"))) inline float max_avx512(std::int64_t n, const float* x) {
  // (_mm512_mask_max_ps with every lane: _mm512_max_ps's undefined source warns in GCC 12)
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 acc = lowest;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_mask_max_ps(acc, 0xffff, _mm512_loadu_ps(x + i), acc);
  if (i < n)
    acc = _mm512_mask_max_ps(acc, 0xffff,
                             _mm512_mask_loadu_ps(lowest, static_cast<__mmask16>((1u << (n - i)) - 1), x + i), acc);
  const f32x16 mx = __builtin_bit_cast(f32x16, acc);
  float m = x[0];
  for (int j = 0; j < 16; ++j) m = mx[j] > m ? mx[j] : m;
  return m;
}
__attribute__((target("avx512f"))) inline std::int64_t gelu_forward_avx512(std::int64_t n, const float* x, float* y) {
  return gelu_forward_packs<f32x16>(0, n, x, y);
}
__attribute__((target("avx512f"))) inline std::int64_t gelu_backward_avx512(std::int64_t n, const float* x,
                                                                           const float* y, const float* dy, float* dx,
                                                                           bool accumulate) {
  return gelu_backward_packs<f32x16>(0, n, x, y, dy, dx, accumulate);
}
#endif

}  // namespace detail

/// e^x (float: detail::exp_of's range and accuracy; double: std::exp).
template <class T>
inline T fast_exp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    float y;
    detail::exp_of(x, y);
    return y;
  } else
    return std::exp(x);
}

/// The largest of x[0, n), n > 0.
template <class T>
T max_of(std::int64_t n, const T* x) {
#ifdef STRATA_AVX512_PACKS
  if constexpr (std::is_same_v<T, float>)
    if (detail::avx512f_runs()) return detail::max_avx512(n, x);
#endif
  T mx = x[0];
  for (std::int64_t c = 1; c < n; ++c) mx = x[c] > mx ? x[c] : mx;
  return mx;
}

/// y[i] = e^{s (x[i] - m)} for i < n, returning their sum: a softmax row's exponentials
/// (float: packs, -inf giving 0; double: std::exp).
template <class T>
T exp_shifted_sum(std::int64_t n, const T* STRATA_RESTRICT x, T s, T m, T* STRATA_RESTRICT y) {
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
    std::int64_t i = 0;
#ifdef STRATA_AVX512_PACKS
    if (detail::avx512f_runs()) i = detail::exp_shifted_avx512(n, x, s, m, y, sum);
#endif
#ifdef STRATA_AVX2_PACKS
    if (i == 0 && detail::avx2_with_fma()) i = detail::exp_shifted_avx2(n, x, s, m, y, sum);
#endif
#ifdef STRATA_FLOAT_PACKS
    i = detail::exp_shifted_packs<detail::f32x4>(i, n, x, s, m, y, sum);
#endif
    detail::exp_shifted_packs<float>(i, n, x, s, m, y, sum);
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum += (y[i] = std::exp(s * (x[i] - m)));
  }
  return sum;
}

/// y = x Φ(x): GELU, its exact (erf) form. float: packs of 16 on AVX-512, 8 on AVX2 + FMA, else 4.
template <class T>
void gelu_forward(std::int64_t n, const T* STRATA_RESTRICT x, T* STRATA_RESTRICT y) {
  if constexpr (std::is_same_v<T, float>) {
    std::int64_t i = 0;
#ifdef STRATA_AVX512_PACKS
    if (detail::avx512f_runs()) i = detail::gelu_forward_avx512(n, x, y);
#endif
#ifdef STRATA_AVX2_PACKS
    if (i == 0 && detail::avx2_with_fma()) i = detail::gelu_forward_avx2(n, x, y);
#endif
#ifdef STRATA_FLOAT_PACKS
    i = detail::gelu_forward_packs<detail::f32x4>(i, n, x, y);
#endif
    detail::gelu_forward_packs<float>(i, n, x, y);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * std::erfc(-x[i] * T(0.70710678118654752440));
  }
}

/// dx (+)= dy (Φ(x) + x φ(x)), y being gelu_forward's values for x (float reads Φ(x) back from
/// them: detail::gelu_backward_packs; double computes Φ and leaves y unread).
template <class T>
void gelu_backward(std::int64_t n, const T* STRATA_RESTRICT x, const T* STRATA_RESTRICT y, const T* STRATA_RESTRICT dy,
                   T* STRATA_RESTRICT dx, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    std::int64_t i = 0;
#ifdef STRATA_AVX512_PACKS
    if (detail::avx512f_runs()) i = detail::gelu_backward_avx512(n, x, y, dy, dx, accumulate);
#endif
#ifdef STRATA_AVX2_PACKS
    if (i == 0 && detail::avx2_with_fma()) i = detail::gelu_backward_avx2(n, x, y, dy, dx, accumulate);
#endif
#ifdef STRATA_FLOAT_PACKS
    i = detail::gelu_backward_packs<detail::f32x4>(i, n, x, y, dy, dx, accumulate);
#endif
    detail::gelu_backward_packs<float>(i, n, x, y, dy, dx, accumulate);
  } else {
    (void)y;
    for (std::int64_t i = 0; i < n; ++i) {
      const T cdf = T(0.5) * std::erfc(-x[i] * T(0.70710678118654752440));
      const T g = dy[i] * (cdf + x[i] * T(0.39894228040143267794) * std::exp(T(-0.5) * x[i] * x[i]));
      dx[i] = accumulate ? dx[i] + g : g;
    }
  }
}

}  // namespace strata::kernels::cpu

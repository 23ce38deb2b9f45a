/// \file
/// Batch normalisation's two reductions (kernels/cpu/batch_norm.hpp) for float on x86-64 CPUs
/// with AVX-512: a channel's moments and its gradient sums, 16 floats a step, added in double
/// lanes from the first value on. The generic loops build for the baseline x86-64 (four
/// floats a vector) and convert every plane's float lanes to double; on the ResNet's planes of
/// 16 to 784 pixels they took 0.34-1.06 ns a value, as long as the convolutions' im2col.
#pragma once

#include <cstdint>

#include <strata/config.hpp>  // STRATA_RESTRICT

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_BATCH_NORM_AVX512 1
#include <immintrin.h>
#endif

namespace strata::kernels::cpu::batch_norm_avx512 {

#ifdef STRATA_BATCH_NORM_AVX512
/// Two lanes of doubles, 16 values: a float vector's halves added as they are widened.
struct DoubleLanes {
  __m512d lo, hi;

  [[gnu::target("avx512f")]] DoubleLanes() : lo(_mm512_setzero_pd()), hi(_mm512_setzero_pd()) {}

  /// The two halves of v, widened (intrinsic casts to 256 bits warn in GCC 12: vector shuffles).
  [[gnu::target("avx512f"), gnu::always_inline]] static inline void widen(__m512 v, __m512d& a, __m512d& b) {
    using f32x16 = float __attribute__((vector_size(64)));
    const auto f = __builtin_bit_cast(f32x16, v);
    a = _mm512_maskz_cvtps_pd(0xff, __builtin_bit_cast(__m256, __builtin_shufflevector(f, f, 0, 1, 2, 3, 4, 5, 6, 7)));
    b = _mm512_maskz_cvtps_pd(0xff,
                              __builtin_bit_cast(__m256, __builtin_shufflevector(f, f, 8, 9, 10, 11, 12, 13, 14, 15)));
  }
  [[gnu::target("avx512f"), gnu::always_inline]] inline void add(__m512 v) {
    __m512d a, b;
    widen(v, a, b);
    lo = _mm512_add_pd(lo, a);
    hi = _mm512_add_pd(hi, b);
  }
  [[gnu::target("avx512f"), gnu::always_inline]] inline void add_square(__m512 v) {
    __m512d a, b;
    widen(v, a, b);
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  /// l[0, 16) += the lanes; the lanes = l[0, 16).
  [[gnu::target("avx512f"), gnu::always_inline]] inline void add_to(double* l) const {
    _mm512_storeu_pd(l, _mm512_add_pd(_mm512_loadu_pd(l), lo));
    _mm512_storeu_pd(l + 8, _mm512_add_pd(_mm512_loadu_pd(l + 8), hi));
  }
  [[gnu::target("avx512f"), gnu::always_inline]] inline void load(const double* l) {
    lo = _mm512_loadu_pd(l);
    hi = _mm512_loadu_pd(l + 8);
  }
  /// The 16 lanes' sum, in a fixed order.
  [[gnu::target("avx512f")]] double total() const {
    alignas(64) double l[8];
    _mm512_store_pd(l, _mm512_add_pd(lo, hi));
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
};

/// The lanes of a 16-float step at i of a plane of `plane` values.
[[gnu::target("avx512f"), gnu::always_inline]] inline __mmask16 step_mask(std::int64_t i, std::int64_t plane) {
  return static_cast<__mmask16>(plane - i >= 16 ? 0xffff : (1u << (plane - i)) - 1);
}

/// batch_norm.hpp's channel_moments for float: sum[c] += Σ x, sumsq[c] += Σ x², about the
/// channel's first value, every shifted value (float, as there) added in double.
[[gnu::target("avx512f")]] inline void channel_moments(std::int64_t images, std::int64_t channels, std::int64_t plane,
                                                       const float* STRATA_RESTRICT x, double* STRATA_RESTRICT sum,
                                                       double* STRATA_RESTRICT sumsq) {
  for (std::int64_t c = 0; c < channels && images > 0 && plane > 0; ++c) {
    const float k = x[c * plane];  // the shift
    const __m512 vk = _mm512_set1_ps(k);
    DoubleLanes s, q;
    for (std::int64_t n = 0; n < images; ++n) {
      const float* p = x + (n * channels + c) * plane;
      std::int64_t i = 0;
      for (; i + 16 <= plane; i += 16) {
        const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(p + i), vk);
        s.add(v);
        q.add_square(v);
      }
      if (i < plane) {
        const __mmask16 m = step_mask(i, plane);
        const __m512 v = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, p + i), vk);
        s.add(v);
        q.add_square(v);
      }
    }
    const double ss = s.total(), qq = q.total();
    const double kk = static_cast<double>(k), count = static_cast<double>(images * plane);
    sum[c] += ss + count * kk;
    sumsq[c] += qq + 2 * kk * ss + count * kk * kk;
  }
}

/// One step of grad_sums: 16 values at g (m's lanes of them unless kWhole), masked by the
/// ReLU's output y where given, added to s and, times x - mean, to sh.
template <bool kWhole>
[[gnu::target("avx512f"), gnu::always_inline]] inline void grad_step(float* g, const float* x, const float* y, __mmask16 m,
                                                                     __m512 mean, DoubleLanes& s, DoubleLanes& sh) {
  __m512 v = kWhole ? _mm512_loadu_ps(g) : _mm512_maskz_loadu_ps(m, g);
  if (y != nullptr) {  // y > 0 ? dy : 0, a NaN output giving 0
    const __m512 out = kWhole ? _mm512_loadu_ps(y) : _mm512_maskz_loadu_ps(m, y);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(out, _mm512_setzero_ps(), _CMP_GT_OQ), v);
    if constexpr (kWhole)
      _mm512_storeu_ps(g, v);
    else
      _mm512_mask_storeu_ps(g, m, v);
  }
  s.add(v);
  const __m512 xv = kWhole ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(m, x);
  sh.add(_mm512_mul_ps(v, _mm512_sub_ps(xv, mean)));  // v is 0 in lanes past the plane
}

/// batch_norm.hpp's batch_norm_grad_sums for float: dy masked in place by a fused ReLU's
/// output (where given), then sum_dy[c] += Σ dy, sum_dy_h[c] += rstd[c] Σ dy (x - mean[c])
/// (each product in float, as there), added in double. Image by image, channel by channel,
/// through memory in order (a channel's planes one after another, 8 KiB apart for 128
/// channels of 16 pixels, made every load wait on the store 4 KiB before it); each channel's
/// lanes are kept in `lanes`, 32 doubles a channel.
[[gnu::target("avx512f")]] inline void grad_sums(std::int64_t images, std::int64_t channels, std::int64_t plane,
                                                 const float* STRATA_RESTRICT x, const float* STRATA_RESTRICT mean,
                                                 const float* STRATA_RESTRICT rstd, float* STRATA_RESTRICT dy,
                                                 const float* STRATA_RESTRICT relu_out, double* STRATA_RESTRICT sum_dy,
                                                 double* STRATA_RESTRICT sum_dy_h, double* STRATA_RESTRICT lanes) {
  for (std::int64_t c = 0; c < channels * 32; c += 8) _mm512_storeu_pd(lanes + c, _mm512_setzero_pd());
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const __m512 vm = _mm512_set1_ps(mean[c]);
      float* g = dy + at;
      const float* xi = x + at;
      DoubleLanes s, sh;
      // Whole vectors, then the last one under a mask (a masked store missing the cache
      // costs more than a plain one: the cold planes of the first layers).
      std::int64_t i = 0;
      for (; i + 16 <= plane; i += 16) grad_step<true>(g + i, xi + i, relu_out ? relu_out + at + i : nullptr, 0xffff, vm, s, sh);
      if (i < plane) grad_step<false>(g + i, xi + i, relu_out ? relu_out + at + i : nullptr, step_mask(i, plane), vm, s, sh);
      double* l = lanes + c * 32;
      s.add_to(l);
      sh.add_to(l + 16);
    }
  for (std::int64_t c = 0; c < channels; ++c) {
    DoubleLanes s, sh;
    s.load(lanes + c * 32);
    sh.load(lanes + c * 32 + 16);
    sum_dy[c] += s.total();
    sum_dy_h[c] += sh.total() * static_cast<double>(rstd[c]);
  }
}
#endif

}  // namespace strata::kernels::cpu::batch_norm_avx512

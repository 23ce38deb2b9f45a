/// \file
/// Row-wise softmax (scaled, optionally causally masked), log-softmax and the fused softmax +
/// cross-entropy, numerically stable (the row maximum is subtracted before exponentiating).
#pragma once

#include <algorithm>  // std::fill_n
#include <cmath>
#include <cstdint>
#include <type_traits>  // std::is_same_v

#include <strata/config.hpp>               // STRATA_RESTRICT
#include <strata/kernels/cpu/fast_math.hpp>  // exp_shifted_sum, max_of
#include <strata/kernels/cpu/vecdot.hpp>     // dot, sum

namespace strata::kernels::cpu {

/// The entries of row r that a causal mask keeps: with `period` > 0 the rows are queries
/// r % period of `period` and a query q sees the keys c <= q + (cols - period) (the last query
/// sees every key); 0 keeps every entry.
inline std::int64_t causal_visible(std::int64_t r, std::int64_t cols, std::int64_t period) {
  if (period <= 0) return cols;
  const std::int64_t v = r % period + cols - period + 1;
  return v < 0 ? 0 : (v > cols ? cols : v);
}

namespace detail {
#ifdef STRATA_AVX512_PACKS
// Whole rows in packs of 16 on AVX-512, one call for all of them: attention's rows are 1 to 64
// entries long, and per row the calls, their dispatch, 4-wide loops and serial sums of lanes
// cost more than the arithmetic.

/// The sum of a pack's 16 lanes, in 4 halvings (a chain of 15 scalar additions is most of
/// the time of a short row).
__attribute__((target("avx512f"))) inline float horizontal_sum(const __m512& v) {
  // (vector types, not _mm512_extractf64x4_pd: its undefined source warns in GCC 12)
  using f32x8v = float __attribute__((vector_size(32)));
  using f32x4v = float __attribute__((vector_size(16)));
  const f32x16 x = __builtin_bit_cast(f32x16, v);
  const f32x8v h = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  const f32x4v q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (q[0] + q[2]) + (q[1] + q[3]);
}

/// row[c0, c1) = 0: whole packs, one masked store for the last few.
__attribute__((target("avx512f"))) inline void store_zeros(float* row, std::int64_t c0, std::int64_t c1) {
  std::int64_t c = c0;
  for (; c + 16 <= c1; c += 16) _mm512_storeu_ps(row + c, _mm512_setzero_ps());
  if (c < c1) _mm512_mask_storeu_ps(row + c, static_cast<__mmask16>((1u << (c1 - c)) - 1), _mm512_setzero_ps());
}

/// softmax_forward's rows.
__attribute__((target("avx512f"))) inline void softmax_forward_avx512(std::int64_t rows, std::int64_t cols,
                                                                     const float* x, float* y, float scale,
                                                                     std::int64_t period) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const std::int64_t vis = causal_visible(r, cols, period);
    float inv = 0.0f;
    if (vis > 0) {
      float s = 0.0f;
      exp_shifted_avx512(vis, xr, scale, max_avx512(vis, xr), yr, s);
      inv = 1.0f / s;
    }
    const __m512 vinv = _mm512_set1_ps(inv);
    std::int64_t c = 0;
    for (; c + 16 <= vis; c += 16) _mm512_storeu_ps(yr + c, _mm512_mul_ps(_mm512_loadu_ps(yr + c), vinv));
    if (c < vis) {
      const auto m = static_cast<__mmask16>((1u << (vis - c)) - 1);
      _mm512_mask_storeu_ps(yr + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, yr + c), vinv));
    }
    store_zeros(yr, vis, cols);
  }
}

/// softmax_backward's rows; the dot product in 8 lanes, as cpu::dot's.
__attribute__((target("avx512f"))) inline void softmax_backward_avx512(std::int64_t rows, std::int64_t cols,
                                                                      const float* y, const float* dy, float scale,
                                                                      float* dx, bool accumulate, std::int64_t period) {
  const __m512 vscale = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    const std::int64_t vis = causal_visible(r, cols, period);
    __m512 lanes = zero;
    for (std::int64_t c = 0; c < vis; c += 16) {
      const auto m = static_cast<__mmask16>(vis - c >= 16 ? 0xffff : (1u << (vis - c)) - 1);
      lanes = _mm512_add_ps(lanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, gr + c), _mm512_maskz_loadu_ps(m, yr + c)));
    }
    const __m512 vdot = _mm512_set1_ps(horizontal_sum(lanes));
    std::int64_t c = 0;
    for (; c + 16 <= vis; c += 16) {
      __m512 v = _mm512_mul_ps(_mm512_mul_ps(vscale, _mm512_loadu_ps(yr + c)), _mm512_sub_ps(_mm512_loadu_ps(gr + c), vdot));
      if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(dr + c), v);
      _mm512_storeu_ps(dr + c, v);
    }
    if (c < vis) {
      const auto m = static_cast<__mmask16>((1u << (vis - c)) - 1);
      __m512 v = _mm512_mul_ps(_mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(m, yr + c)),
                               _mm512_sub_ps(_mm512_maskz_loadu_ps(m, gr + c), vdot));
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dr + c), v);
      if (!accumulate && vis + 16 <= cols) {  // the first masked zeros with it, in one full store
        _mm512_storeu_ps(dr + c, v);
        c += 16;
      } else {
        _mm512_mask_storeu_ps(dr + c, m, v);
        c = vis;
      }
    }
    if (!accumulate) store_zeros(dr, c, cols);
  }
}
#endif
}  // namespace detail

/// y[r, :] = softmax(scale * x[r, :]) over the row's visible entries (causal_visible); the
/// masked entries are exactly 0, and so is a row with none visible. `scale` > 0.
template <class T>
void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y, T scale, std::int64_t period) {
#ifdef STRATA_AVX512_PACKS
  if constexpr (std::is_same_v<T, float>)
    if (detail::avx512f_runs()) return detail::softmax_forward_avx512(rows, cols, x, y, scale, period);
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const std::int64_t vis = causal_visible(r, cols, period);
    const T mx = vis > 0 ? max_of<T>(vis, xr) : T(0);
    const T s = exp_shifted_sum<T>(vis, xr, scale, mx, yr);
    const T inv = vis > 0 ? T(1) / s : T(0);
    for (std::int64_t c = 0; c < vis; ++c) yr[c] *= inv;
    for (std::int64_t c = vis; c < cols; ++c) yr[c] = T(0);
  }
}

/// dx (+)= scale * y * (dy - sum(dy * y)) per row, over the row's visible entries
/// (causal_visible with `period`, as the forward's): dy is not read past them, and dx there is
/// 0 (left as it was when accumulating).
template <class T>
void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T scale, T* dx, bool accumulate,
                      std::int64_t period = 0) {
#ifdef STRATA_AVX512_PACKS
  if constexpr (std::is_same_v<T, float>)
    if (detail::avx512f_runs()) return detail::softmax_backward_avx512(rows, cols, y, dy, scale, dx, accumulate, period);
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* dr = dx + r * cols;
    const std::int64_t vis = causal_visible(r, cols, period);
    const T dot = cpu::dot<T>(vis, gr, yr);
    if (accumulate)
      for (std::int64_t c = 0; c < vis; ++c) dr[c] += scale * yr[c] * (gr[c] - dot);
    else
      for (std::int64_t c = 0; c < vis; ++c) dr[c] = scale * yr[c] * (gr[c] - dot);
    if (!accumulate)
      for (std::int64_t c = vis; c < cols; ++c) dr[c] = T(0);
  }
}

/// y[r, :] = x[r, :] - max - log(sum(exp(x[r, :] - max))); x and y do not overlap (the row's
/// exponentials pass through y).
template <class T>
void log_softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  if (cols == 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T mx = max_of<T>(cols, xr);
    const T lse = mx + std::log(exp_shifted_sum<T>(cols, xr, T(1), mx, yr));
    for (std::int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
  }
}

/// dx (+)= dy - exp(y) * sum(dy) per row; y and dx do not overlap.
template <class T>
void log_softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx, bool accumulate) {
  constexpr std::int64_t kChunk = 256;  // exponentials at a time, when dx is added to
  T e[kChunk];
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* dr = dx + r * cols;
    const T s = cpu::sum<T>(cols, gr);
    if (!accumulate) {
      (void)exp_shifted_sum<T>(cols, yr, T(1), T(0), dr);
      for (std::int64_t c = 0; c < cols; ++c) dr[c] = gr[c] - dr[c] * s;
      continue;
    }
    for (std::int64_t c0 = 0; c0 < cols; c0 += kChunk) {
      const std::int64_t w = cols - c0 < kChunk ? cols - c0 : kChunk;
      (void)exp_shifted_sum<T>(w, yr + c0, T(1), T(0), e);
      for (std::int64_t c = 0; c < w; ++c) dr[c0 + c] += gr[c0 + c] - e[c] * s;
    }
  }
}

/// Per-row loss[r] = logsumexp(x[r]) - x[r, label[r]], 0 for a padding row (label < 0);
/// `prob` receives softmax(x) for the backward pass, and `row_loss`, when given, each row's
/// loss. Returns the sum of the row losses (accumulated in double). The exponentials are
/// softmax_forward's (packs in float).
template <class T, class Label>
double softmax_xent_forward(std::int64_t rows, std::int64_t cols, const T* x, const Label* label, T* prob,
                            T* row_loss = nullptr) {
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* pr = prob + r * cols;
    const T mx = max_of<T>(cols, xr);
    const T s = exp_shifted_sum<T>(cols, xr, T(1), mx, pr);
    const T inv = T(1) / s;
    for (std::int64_t c = 0; c < cols; ++c) pr[c] *= inv;
    const T loss = label[r] >= 0 ? mx + std::log(s) - xr[label[r]] : T(0);
    if (row_loss != nullptr) row_loss[r] = loss;
    total += static_cast<double>(loss);
  }
  return total;
}

/// dx[r, c] = scale * row_scale[r] * (prob[r, c] - [c == label[r]]) (row_scale null: 1); 0 for a
/// padding row (label < 0).
template <class T, class Label>
void softmax_xent_backward(std::int64_t rows, std::int64_t cols, const T* prob, const Label* label, T scale, T* dx,
                           bool accumulate, const T* row_scale = nullptr) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* STRATA_RESTRICT pr = prob + r * cols;
    T* STRATA_RESTRICT dr = dx + r * cols;
    if (label[r] < 0) {  // a padding row
      if (!accumulate) std::fill_n(dr, cols, T(0));
      continue;
    }
    const T sr = row_scale != nullptr ? scale * row_scale[r] : scale;
    // sr p, then sr less at the label: one pass without a compare per element
    if (accumulate)
      for (std::int64_t c = 0; c < cols; ++c) dr[c] += sr * pr[c];
    else
      for (std::int64_t c = 0; c < cols; ++c) dr[c] = sr * pr[c];
    dr[label[r]] -= sr;
  }
}

}  // namespace strata::kernels::cpu

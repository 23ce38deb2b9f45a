/// \file
/// Layer normalisation over the last axis, one pass per row each way: the forward pass keeps
/// each row's mean and 1/σ for the backward pass, which needs no second look at the statistics.
/// The row sums run in 16 independent accumulators of T (vectorised), added in double (the
/// forward's) or in T (the backward's). float runs the same loops compiled for AVX-512 where
/// the CPU has it (picked at run time, as fast_math.hpp's packs).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <strata/kernels/cpu/fast_math.hpp>  // STRATA_AVX512_PACKS, avx512f_runs

namespace strata::kernels::cpu {

inline constexpr int kRowLanes = 16;

/// The sum of kRowLanes lanes in double, pairwise (lane j with lane j + 8, then j + 4, ...):
/// four additions deep, where adding them in order made a chain of sixteen that each row
/// waited on, twice (for 128 columns a third of the forward's time: 132 -> 84 µs for 2048 rows).
template <class T>
[[gnu::always_inline]] inline double lane_tree_sum(const T (&lanes)[kRowLanes]) {
  double s[kRowLanes];
  for (int j = 0; j < kRowLanes; ++j) s[j] = static_cast<double>(lanes[j]);
  for (int w = kRowLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) s[j] += s[j + w];
  return s[0];
}

/// Σ f(c) for c in [0, n): kRowLanes lanes of T, then their sum in double.
template <class T, class F>
[[gnu::always_inline]] inline double lane_sum(std::int64_t n, F&& f) {
  T lanes[kRowLanes] = {};
  std::int64_t c = 0;
  for (; c + kRowLanes <= n; c += kRowLanes)
    for (int j = 0; j < kRowLanes; ++j) lanes[j] += f(c + j);
  double s = lane_tree_sum(lanes);
  for (; c < n; ++c) s += static_cast<double>(f(c));
  return s;
}

namespace detail {

template <class T>
[[gnu::always_inline]] inline void layer_norm_forward_rows(std::int64_t rows, std::int64_t cols, const T* x, const T* w,
                                                           const T* b, double eps, T* y, T* stats) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const double mean = lane_sum<T>(cols, [&](std::int64_t c) { return xr[c]; }) / static_cast<double>(cols);
    const T mt = static_cast<T>(mean);
    const double sq = lane_sum<T>(cols, [&](std::int64_t c) {
      const T d = xr[c] - mt;
      return d * d;
    });
    const T m = static_cast<T>(mean), rstd = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
    stats[2 * r] = m;
    stats[2 * r + 1] = rstd;
    for (std::int64_t c = 0; c < cols; ++c) {
      const T h = (xr[c] - m) * rstd;
      yr[c] = (w ? h * w[c] : h) + (b ? b[c] : T(0));
    }
  }
}

template <class T>
[[gnu::always_inline]] inline void layer_norm_backward_rows(std::int64_t rows, std::int64_t cols, const T* x,
                                                            const T* w, const T* stats, const T* dy, T* dx,
                                                            bool accumulate_dx, T* dw, bool accumulate_dw, T* db,
                                                            bool accumulate_db) {
  if (dw && !accumulate_dw)
    for (std::int64_t c = 0; c < cols; ++c) dw[c] = T(0);
  if (db && !accumulate_db)
    for (std::int64_t c = 0; c < cols; ++c) db[c] = T(0);
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const T m = stats[2 * r], rstd = stats[2 * r + 1];
    // Σ dh and Σ dh h in lanes (dh = dy w, h the normalised x): one chain each would wait on
    // every addition.
    T lanes_dh[kRowLanes] = {}, lanes_dh_h[kRowLanes] = {};
    std::int64_t c = 0;
    for (; c + kRowLanes <= cols; c += kRowLanes)
      for (int j = 0; j < kRowLanes; ++j) {
        const T h = (xr[c + j] - m) * rstd;
        const T dh = w ? gr[c + j] * w[c + j] : gr[c + j];
        lanes_dh[j] += dh;
        lanes_dh_h[j] += dh * h;
      }
    T sum_dh = 0, sum_dh_h = 0;
    for (int j = 0; j < kRowLanes; ++j) {
      sum_dh += lanes_dh[j];
      sum_dh_h += lanes_dh_h[j];
    }
    for (; c < cols; ++c) {
      const T h = (xr[c] - m) * rstd;
      const T dh = w ? gr[c] * w[c] : gr[c];
      sum_dh += dh;
      sum_dh_h += dh * h;
    }
    if (dw)
      for (std::int64_t k = 0; k < cols; ++k) dw[k] += gr[k] * ((xr[k] - m) * rstd);
    if (db)
      for (std::int64_t k = 0; k < cols; ++k) db[k] += gr[k];
    if (!dx) continue;
    T* dr = dx + r * cols;
    const T mean_dh = sum_dh * inv_cols, mean_dh_h = sum_dh_h * inv_cols;
    for (std::int64_t k = 0; k < cols; ++k) {
      const T h = (xr[k] - m) * rstd;
      const T dh = w ? gr[k] * w[k] : gr[k];
      const T v = rstd * (dh - mean_dh - h * mean_dh_h);
      dr[k] = accumulate_dx ? dr[k] + v : v;
    }
  }
}

#ifdef STRATA_AVX512_PACKS
[[gnu::target("avx512f")]] inline void layer_norm_forward_avx512(std::int64_t rows, std::int64_t cols, const float* x,
                                                                 const float* w, const float* b, double eps, float* y,
                                                                 float* stats) {
  layer_norm_forward_rows<float>(rows, cols, x, w, b, eps, y, stats);
}
[[gnu::target("avx512f")]] inline void layer_norm_backward_avx512(std::int64_t rows, std::int64_t cols, const float* x,
                                                                  const float* w, const float* stats, const float* dy,
                                                                  float* dx, bool accumulate_dx, float* dw,
                                                                  bool accumulate_dw, float* db, bool accumulate_db) {
  layer_norm_backward_rows<float>(rows, cols, x, w, stats, dy, dx, accumulate_dx, dw, accumulate_dw, db, accumulate_db);
}
#endif

}  // namespace detail

/// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b (w, b: cols values or null);
/// stats[2r] = mean, stats[2r + 1] = 1 / sqrt(var + eps), the variance biased (over cols).
template <class T>
void layer_norm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* b, double eps, T* y,
                        T* stats) {
#ifdef STRATA_AVX512_PACKS
  if constexpr (std::is_same_v<T, float>)
    if (detail::avx512f_runs()) return detail::layer_norm_forward_avx512(rows, cols, x, w, b, eps, y, stats);
#endif
  detail::layer_norm_forward_rows<T>(rows, cols, x, w, b, eps, y, stats);
}

/// dx (+)= rstd * (dh - mean(dh) - h * mean(dh * h)) with dh = dy * w, h the normalised x;
/// dw (+)= sum over rows of dy * h, db (+)= sum over rows of dy. Any of dx, dw, db may be
/// null; the `accumulate_*` flags say whether to add to what they hold.
template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* stats, const T* dy,
                         T* dx, bool accumulate_dx, T* dw, bool accumulate_dw, T* db, bool accumulate_db) {
#ifdef STRATA_AVX512_PACKS
  if constexpr (std::is_same_v<T, float>)
    if (detail::avx512f_runs())
      return detail::layer_norm_backward_avx512(rows, cols, x, w, stats, dy, dx, accumulate_dx, dw, accumulate_dw, db,
                                                accumulate_db);
#endif
  detail::layer_norm_backward_rows<T>(rows, cols, x, w, stats, dy, dx, accumulate_dx, dw, accumulate_dw, db,
                                      accumulate_db);
}

}  // namespace strata::kernels::cpu

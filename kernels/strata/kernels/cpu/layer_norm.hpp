/// \file
/// Layer normalisation over the last axis, one pass per row each way: the forward pass keeps
/// each row's mean and 1/σ for the backward pass, which needs no second look at the statistics.
/// The row sums run in 8 independent accumulators of T (vectorised), added in double.
#pragma once

#include <cmath>
#include <cstdint>

namespace strata::kernels::cpu {

/// Σ f(c) for c in [0, n): 8 lanes of T, then their sum in double.
template <class T, class F>
double lane_sum(std::int64_t n, F&& f) {
  constexpr int kLanes = 8;
  T lanes[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += f(c + j);
  double s = 0;
  for (int j = 0; j < kLanes; ++j) s += static_cast<double>(lanes[j]);
  for (; c < n; ++c) s += static_cast<double>(f(c));
  return s;
}

/// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b (w, b: cols values or null);
/// stats[2r] = mean, stats[2r + 1] = 1 / sqrt(var + eps), the variance biased (over cols).
template <class T>
void layer_norm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* b, double eps, T* y,
                        T* stats) {
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

/// dx (+)= rstd * (dh - mean(dh) - h * mean(dh * h)) with dh = dy * w, h the normalised x;
/// dw (+)= sum over rows of dy * h, db (+)= sum over rows of dy. Any of dx, dw, db may be
/// null; the `accumulate_*` flags say whether to add to what they hold.
template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* w, const T* stats, const T* dy,
                         T* dx, bool accumulate_dx, T* dw, bool accumulate_dw, T* db, bool accumulate_db) {
  if (dw && !accumulate_dw)
    for (std::int64_t c = 0; c < cols; ++c) dw[c] = T(0);
  if (db && !accumulate_db)
    for (std::int64_t c = 0; c < cols; ++c) db[c] = T(0);
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const T m = stats[2 * r], rstd = stats[2 * r + 1];
    T sum_dh = 0, sum_dh_h = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const T h = (xr[c] - m) * rstd;
      const T dh = w ? gr[c] * w[c] : gr[c];
      sum_dh += dh;
      sum_dh_h += dh * h;
      if (dw) dw[c] += gr[c] * h;
      if (db) db[c] += gr[c];
    }
    if (!dx) continue;
    T* dr = dx + r * cols;
    const T mean_dh = sum_dh * inv_cols, mean_dh_h = sum_dh_h * inv_cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const T h = (xr[c] - m) * rstd;
      const T dh = w ? gr[c] * w[c] : gr[c];
      const T v = rstd * (dh - mean_dh - h * mean_dh_h);
      dr[c] = accumulate_dx ? dr[c] + v : v;
    }
  }
}

}  // namespace strata::kernels::cpu

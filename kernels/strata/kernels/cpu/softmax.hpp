/// \file
/// Row-wise softmax (scaled, optionally causally masked), log-softmax and the fused softmax +
/// cross-entropy, numerically stable (the row maximum is subtracted before exponentiating).
#pragma once

#include <cmath>
#include <cstdint>

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

/// y[r, :] = softmax(scale * x[r, :]) over the row's visible entries (causal_visible); the
/// masked entries are exactly 0, and so is a row with none visible. `scale` > 0.
template <class T>
void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y, T scale, std::int64_t period) {
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

/// dx = scale * y * (dy - sum(dy * y)) per row (0 where y is masked).
template <class T>
void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T scale, T* dx, bool accumulate) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* dr = dx + r * cols;
    const T dot = cpu::dot<T>(cols, gr, yr);
    if (accumulate)
      for (std::int64_t c = 0; c < cols; ++c) dr[c] += scale * yr[c] * (gr[c] - dot);
    else
      for (std::int64_t c = 0; c < cols; ++c) dr[c] = scale * yr[c] * (gr[c] - dot);
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

/// Per-row loss[r] = logsumexp(x[r]) - x[r, label[r]]; `prob` receives softmax(x) for the
/// backward pass. Returns the sum of the row losses (accumulated in double).
template <class T, class Label>
double softmax_xent_forward(std::int64_t rows, std::int64_t cols, const T* x, const Label* label, T* prob) {
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* pr = prob + r * cols;
    T mx = xr[0];
    for (std::int64_t c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
    T s = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      pr[c] = std::exp(xr[c] - mx);
      s += pr[c];
    }
    const T inv = T(1) / s;
    for (std::int64_t c = 0; c < cols; ++c) pr[c] *= inv;
    if (label[r] >= 0) total += static_cast<double>(mx + std::log(s) - xr[label[r]]);  // < 0: a padding row
  }
  return total;
}

/// dx[r, c] = scale * (prob[r, c] - [c == label[r]]); 0 for a padding row (label < 0).
template <class T, class Label>
void softmax_xent_backward(std::int64_t rows, std::int64_t cols, const T* prob, const Label* label, T scale, T* dx,
                           bool accumulate) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* pr = prob + r * cols;
    T* dr = dx + r * cols;
    const bool pad = label[r] < 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const T v = pad ? T(0) : scale * (pr[c] - (c == static_cast<std::int64_t>(label[r]) ? T(1) : T(0)));
      dr[c] = accumulate ? dr[c] + v : v;
    }
  }
}

}  // namespace strata::kernels::cpu

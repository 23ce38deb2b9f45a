/// \file
/// Inner products of rows: the sums behind strata::vecdot, in independent lanes so that the
/// compiler vectorises them without reordering a float sum it was not allowed to; and the
/// in-place passes of gradient clipping (squared_norm, scale_inplace).
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

/// Σ x[i] y[i] for i < n: kLanes accumulators of T, then their sum.
template <class T>
T dot(std::int64_t n, const T* x, const T* y) {
  constexpr int kLanes = 8;
  T lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += x[i + j] * y[i + j];
  T s = 0;
  for (int j = 0; j < kLanes; ++j) s += lanes[j];
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

/// Σ x[i] for i < n: kLanes accumulators of T, then their sum.
template <class T>
T sum(std::int64_t n, const T* x) {
  constexpr int kLanes = 8;
  T lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += x[i + j];
  T s = 0;
  for (int j = 0; j < kLanes; ++j) s += lanes[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

/// Σ x[i]² for i < n, in double: blocks of kBlock values are summed in kLanes lanes of T and
/// each block's sum is added in double, so a float gradient of millions of values keeps the
/// accuracy of a float64 sum to a few float ulp a block, in one read of x (clipping by the
/// global norm: it was a product into a temporary and a sum of that).
template <class T>
double squared_norm(std::int64_t n, const T* x) {
  constexpr int kLanes = 16;
  constexpr std::int64_t kBlock = 1024;
  double total = 0;
  std::int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    T lanes[kLanes] = {};
    for (std::int64_t b = i; b < i + kBlock; b += kLanes)
      for (int j = 0; j < kLanes; ++j) lanes[j] += x[b + j] * x[b + j];
    double s = 0;
    for (int j = 0; j < kLanes; ++j) s += static_cast<double>(lanes[j]);
    total += s;
  }
  for (; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}

/// x[i] *= a for i < n, in place (no alias between a source and a destination to rule out, so
/// the loop vectorises).
template <class T>
void scale_inplace(std::int64_t n, T a, T* x) {
  for (std::int64_t i = 0; i < n; ++i) x[i] *= a;
}

/// y[i] = a x[i] for i < n.
template <class T>
void scale(std::int64_t n, T a, const T* x, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a * x[i];
}

/// y[i] += a x[i] for i < n.
template <class T>
void axpy(std::int64_t n, T a, const T* x, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace strata::kernels::cpu

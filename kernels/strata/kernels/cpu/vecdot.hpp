/// \file
/// Inner products of rows: the sums behind strata::vecdot, in independent lanes so that the
/// compiler vectorises them without reordering a float sum it was not allowed to.
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

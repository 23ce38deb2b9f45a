// Independent float64 references the tests hold strata's kernels against: plain loops,
// written for clarity, with nothing shared with the library's kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <strata/strata.hpp>

namespace ref {

/// Row-major C[m,n] = op(A) op(B), in double.
inline std::vector<double> matmul(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                                  const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<std::size_t>(p * m + i)] : a[static_cast<std::size_t>(i * k + p)];
        const double bv = tb ? b[static_cast<std::size_t>(j * k + p)] : b[static_cast<std::size_t>(p * n + j)];
        s += av * bv;
      }
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

/// Largest |a - b| relative to max(1, |b|).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return a.size() == b.size() ? worst : INFINITY;
}

inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed) {
  strata::Generator g(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = g.uniform(-1, 1);
  return v;
}

}  // namespace ref

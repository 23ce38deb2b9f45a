// The vectorisable exp and GELU of float32 passes against <cmath> in double, over the ranges a
// softmax and a Transformer's MLP feed them (the float64 paths call <cmath> itself).
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <strata/kernels/cpu/fast_math.hpp>

namespace k = strata::kernels::cpu;

TEST_CASE("Kernels.FastMath.ExpWithinFloatAccuracy") {
  double worst = 0;
  for (double v = -87.0; v <= 88.0; v += 1e-3) {
    const float x = static_cast<float>(v);
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(static_cast<double>(k::fast_exp(x)) - want) / want);
  }
  CHECK(worst < 2e-7);
  CHECK(k::fast_exp(-200.0f) == 0.0f);  // below float's normals: 0, not garbage
  CHECK(k::fast_exp(0.0f) == 1.0f);
  CHECK(std::isnan(k::fast_exp(std::nanf(""))));
}

TEST_CASE("Kernels.FastMath.GeluAndItsDerivativeMatchTheErfForm") {
  std::vector<float> x;
  for (double v = -9.0; v <= 9.0; v += 3e-4) x.push_back(static_cast<float>(v));
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> y(x.size()), ones(x.size(), 1.0f), d(x.size(), 0.5f);
  k::gelu_forward<float>(n, x.data(), y.data());
  k::gelu_backward<float>(n, x.data(), ones.data(), d.data(), true);  // adds to the 0.5 there
  double worst_y = 0, worst_d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double cdf = 0.5 * std::erfc(-v / std::numbers::sqrt2), pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    worst_y = std::max(worst_y, std::abs(y[i] - v * cdf) / std::max(1e-3, std::abs(v * cdf)));
    worst_d = std::max(worst_d, std::abs(d[i] - 0.5 - (cdf + v * pdf)));
  }
  CHECK(worst_y < 1e-5);  // relative, far into the negative tail (Φ(-9) ~ 1e-19)
  CHECK(worst_d < 1e-6);
}

// The vectorisable exp and GELU of float32 passes against <cmath> in double, over the ranges a
// softmax and a Transformer's MLP feed them (the float64 paths call <cmath> itself).
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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
  k::gelu_backward<float>(n, x.data(), y.data(), ones.data(), d.data(), true);  // adds to the 0.5 there
  double worst_y = 0, worst_d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double cdf = 0.5 * std::erfc(-v / std::numbers::sqrt2), pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    worst_y = std::max(worst_y, std::abs(y[i] - v * cdf) / std::max(1e-3, std::abs(v * cdf)));
    worst_d = std::max(worst_d, std::abs(d[i] - 0.5 - (cdf + v * pdf)));
  }
  CHECK(worst_y < 1e-5);  // relative, far into the negative tail (Φ(-9) ~ 1e-19)
  CHECK(worst_d < 1e-6);
#ifdef STRATA_FLOAT_PACKS
  // The packs of 4 (the path without AVX2, and the tail after the packs of 8) agree to float
  // rounding (with FMA the packs of 8 round their products differently).
  std::vector<float> y4(x.size());
  const std::int64_t done = k::detail::gelu_forward_packs<k::detail::f32x4>(0, n, x.data(), y4.data());
  CHECK(done == n - n % 4);
  double apart = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(done); ++i)
    apart = std::max(apart, std::abs(static_cast<double>(y4[i]) - y[i]) / std::max(1e-3, std::abs(static_cast<double>(y[i]))));
  CHECK(apart < 2e-6);
#endif
#if defined(STRATA_AVX2_PACKS) && defined(STRATA_AVX512_PACKS)
  // On a CPU with AVX-512 the packs of 16 ran above; the packs of 8 (a CPU with AVX2 alone) are
  // held to them here, forward and backward.
  if (k::detail::avx2_with_fma()) {
    std::vector<float> y8(x.size()), d8(x.size(), 0.5f);
    const std::int64_t done = k::detail::gelu_forward_avx2(n, x.data(), y8.data());
    CHECK(done == n - n % 8);
    CHECK(k::detail::gelu_backward_avx2(n, x.data(), y8.data(), ones.data(), d8.data(), true) == done);
    double apart_y = 0, apart_d = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(done); ++i) {
      apart_y = std::max(apart_y, std::abs(static_cast<double>(y8[i]) - y[i]) / std::max(1e-3, std::abs(static_cast<double>(y[i]))));
      apart_d = std::max(apart_d, std::abs(static_cast<double>(d8[i]) - d[i]));
    }
    CHECK(apart_y < 2e-6);
    CHECK(apart_d < 2e-6);
  }
#endif
}

TEST_CASE("Kernels.FastMath.GeluDerivativeAtZeroSubnormalsAndTheTails") {
  // The backward reads Φ(x) back as y / x: where that is 0 / 0 (x = ±0), a quotient of
  // subnormals, or y underflows (the far negative tail), it still gives the derivative, in
  // every lane position of a pack (each value is tried at every offset of a run of 37).
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> values{0.0f, -0.0f, tiny, -tiny, 3 * tiny, 1e-40f, -1e-38f, 1e-31f, -1e-29f, 1e-20f,
                                  -1e-3f, 0.3f, -4.0f, -9.0f, -12.0f, -13.0f, -13.5f, -14.0f, -20.0f, -1e30f,
                                  6.0f, 20.0f, 1e30f};
  for (const float special : values) {
    for (std::size_t at = 0; at < 37; ++at) {
      std::vector<float> x(37, 0.7f), y(37), dy(37, 1.0f), dx(37);
      x[at] = special;
      const auto n = static_cast<std::int64_t>(x.size());
      k::gelu_forward<float>(n, x.data(), y.data());
      k::gelu_backward<float>(n, x.data(), y.data(), dy.data(), dx.data(), false);
      const double v = special;
      const double want = 0.5 * std::erfc(-v / std::numbers::sqrt2) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
      CAPTURE(special);
      CAPTURE(at);
      REQUIRE(std::isfinite(dx[at]));
      CHECK(std::abs(dx[at] - want) <= 1e-6 * std::max(1.0, std::abs(want)));
      if (std::abs(want) > 1e-30) CHECK(std::abs(dx[at] - want) <= 1e-5 * std::abs(want));  // relative, to x = -12
    }
  }
  std::vector<float> x{std::nanf(""), 1.0f}, y(2), dy{1.0f, 1.0f}, dx(2);
  k::gelu_forward<float>(2, x.data(), y.data());
  k::gelu_backward<float>(2, x.data(), y.data(), dy.data(), dx.data(), false);
  CHECK(std::isnan(dx[0]));  // NaN in, NaN out
}

TEST_CASE("Kernels.FastMath.SoftmaxExponentialsOfARow") {
  // Rows of every length up to 40 (the packs of 8 and 4 and the scalar tail), with -inf (a
  // masked entry: 0) and values far below the maximum (0, not garbage).
  for (int n = 1; n <= 40; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n)), y(x.size());
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(1.7 * i) * 6.0);
    if (n > 3) x[2] = -INFINITY;
    if (n > 5) x[4] = -500.0f;
    const float m = 6.0f, s = 0.75f;
    const float sum = k::exp_shifted_sum<float>(n, x.data(), s, m, y.data());
    double want_sum = 0, worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(s) * (static_cast<double>(x[i]) - m));
      want_sum += want;
      worst = std::max(worst, std::abs(y[i] - want) / std::max(want, 1e-30));
    }
    CHECK(worst < 1e-6);
    CHECK(std::abs(sum - want_sum) / want_sum < 1e-6);
    if (n > 3) CHECK(y[2] == 0.0f);
    if (n > 5) CHECK(y[4] == 0.0f);
  }
  std::vector<float> x{1.0f, std::nanf(""), 2.0f, 0.5f, 1.0f}, y(5);
  CHECK(std::isnan(k::exp_shifted_sum<float>(5, x.data(), 1.0f, 2.0f, y.data())));  // NaN stays NaN
}

TEST_CASE("Kernels.FastMath.RowMaximumAndTheLastPackOfARow") {
  // A row's maximum over every length up to 40 (whole packs of 16 and the masked last one),
  // and the exponentials' last pack writes no further than the row.
  for (int n = 1; n <= 40; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n) + 16, 1e30f), y(x.size(), -7.0f);
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(2.3 * i) * 5.0 - 0.1 * i);
    float want = x[0];
    for (int i = 1; i < n; ++i) want = std::max(want, x[static_cast<std::size_t>(i)]);
    CAPTURE(n);
    CHECK(k::max_of<float>(n, x.data()) == want);
    CHECK(k::max_of<double>(n, std::vector<double>(x.begin(), x.end()).data()) == static_cast<double>(want));
    (void)k::exp_shifted_sum<float>(n, x.data(), 0.5f, want, y.data());
    for (std::size_t i = static_cast<std::size_t>(n); i < y.size(); ++i) CHECK(y[i] == -7.0f);
  }
  std::vector<float> x{std::nanf(""), 1.0f, 2.0f};
  CHECK(std::isnan(k::max_of<float>(3, x.data())));  // a NaN first stays, as the scalar loop keeps it
  x = {1.0f, std::nanf(""), 2.0f};
  CHECK(k::max_of<float>(3, x.data()) == 2.0f);  // after it, passed over
  x.assign(20, -INFINITY);
  CHECK(k::max_of<float>(20, x.data()) == -INFINITY);
}

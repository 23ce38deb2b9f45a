#include "doctest.hpp"
#include "support/reference.hpp"

#include <strata/strata.hpp>

namespace {

// Direct convolution in double: the definition, no im2col.
std::vector<double> conv_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                             int N, int C, int H, int W, int OC, int K, int s, int p) {
  const int OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
  std::vector<double> y(static_cast<std::size_t>(N * OC * OH * OW));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          double acc = b[static_cast<std::size_t>(o)];
          for (int c = 0; c < C; ++c)
            for (int ki = 0; ki < K; ++ki)
              for (int kj = 0; kj < K; ++kj) {
                const int yy = i * s - p + ki, xx = j * s - p + kj;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                acc += x[static_cast<std::size_t>(((n * C + c) * H + yy) * W + xx)] *
                       w[static_cast<std::size_t>(((o * C + c) * K + ki) * K + kj)];
              }
          y[static_cast<std::size_t>(((n * OC + o) * OH + i) * OW + j)] = acc;
        }
  return y;
}

}  // namespace

TEST_CASE("Kernels.Conv2d.MatchesDirectConvolution") {
  struct Case { int N, C, H, W, OC, K, s, p; };
  // The last two have >= 256 output pixels per image: the per-image GEMM path.
  for (Case c : {Case{2, 1, 8, 8, 3, 5, 1, 0}, Case{1, 3, 7, 9, 4, 3, 2, 1}, Case{3, 2, 5, 5, 2, 5, 1, 2},
                 Case{2, 2, 20, 20, 3, 3, 1, 0}, Case{2, 1, 30, 30, 2, 5, 1, 1}}) {
    const auto x = ref::random_vector(static_cast<std::size_t>(c.N * c.C * c.H * c.W), 11);
    const auto w = ref::random_vector(static_cast<std::size_t>(c.OC * c.C * c.K * c.K), 12);
    const auto b = ref::random_vector(static_cast<std::size_t>(c.OC), 13);
    const auto want = conv_ref(x, w, b, c.N, c.C, c.H, c.W, c.OC, c.K, c.s, c.p);
    for (auto dt : {strata::DType::f64, strata::DType::f32}) {
      auto X = strata::from_vector<double>({c.N, c.C, c.H, c.W}, x, dt);
      auto Wt = strata::from_vector<double>({c.OC, c.C, c.K, c.K}, w, dt);
      auto B = strata::from_vector<double>({c.OC}, b, dt);
      auto y = strata::conv2d(X, Wt, B, c.s, c.p);
      CHECK(ref::max_rel_diff(y.to_vector<double>(), want) < (dt == strata::DType::f64 ? 1e-12 : 1e-5));
      auto yr = strata::conv2d(X, Wt, B, c.s, c.p, strata::Activation::relu).to_vector<double>();
      for (std::size_t i = 0; i < want.size(); ++i)
        CHECK(yr[i] == doctest::Approx(std::max(0.0, want[i])).epsilon(1e-5));
    }
  }
  CHECK_THROWS_AS(strata::conv2d(strata::zeros({1, 2, 5, 5}), strata::zeros({3, 1, 3, 3})), strata::invalid_argument);
}

TEST_CASE("Kernels.MaxPool2d.MatchesWindowMaximum") {
  const auto x = ref::random_vector(2 * 3 * 7 * 6, 21);
  auto X = strata::from_vector<double>({2, 3, 7, 6}, x, strata::DType::f64);
  auto y = strata::max_pool2d(X, 2).to_vector<double>();
  REQUIRE(y.size() == static_cast<std::size_t>(2 * 3 * 3 * 3));
  for (int p = 0; p < 6; ++p)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double m = -1e300;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) m = std::max(m, x[static_cast<std::size_t>(p * 42 + (2 * i + a) * 6 + 2 * j + b)]);
        CHECK(y[static_cast<std::size_t>(p * 9 + i * 3 + j)] == m);
      }
}

TEST_CASE("Kernels.MaxPool2d.PropagatesNaN") {
  auto x = strata::from_vector<double>({1, 1, 2, 4}, {1, NAN, 5, 2, 3, 4, 0, 1}, strata::DType::f32);
  const auto y = strata::max_pool2d(x, 2).to_vector<double>();
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == 5);
  const auto z = strata::max_pool2d(x, 3, 1, 1).to_vector<double>();  // the generic path
  CHECK(std::isnan(z[0]));
}

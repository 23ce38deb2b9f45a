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

// relu(conv(x, w) + b) and its gradients for the output gradient gy, in double: the definition.
struct ConvRef {
  std::vector<double> y, dx, dw, db;
};
ConvRef relu_conv_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                      const std::vector<double>& gy, int N, int C, int H, int W, int OC, int K, int s, int p) {
  const int OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
  ConvRef r{conv_ref(x, w, b, N, C, H, W, OC, K, s, p), std::vector<double>(x.size(), 0.0),
            std::vector<double>(w.size(), 0.0), std::vector<double>(b.size(), 0.0)};
  std::vector<double> g(gy.size());
  for (std::size_t k = 0; k < r.y.size(); ++k) {
    g[k] = r.y[k] > 0 ? gy[k] : 0.0;  // the fused ReLU
    r.y[k] = std::max(0.0, r.y[k]);
  }
  auto at = [](int i, int j, int k, int l, int J, int KK, int L) { return static_cast<std::size_t>(((i * J + j) * KK + k) * L + l); };
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          const double gv = g[at(n, o, i, j, OC, OH, OW)];
          r.db[static_cast<std::size_t>(o)] += gv;
          for (int ch = 0; ch < C; ++ch)
            for (int ki = 0; ki < K; ++ki)
              for (int kj = 0; kj < K; ++kj) {
                const int yy = i * s - p + ki, xx = j * s - p + kj;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                r.dw[at(o, ch, ki, kj, C, K, K)] += gv * x[at(n, ch, yy, xx, C, H, W)];
                r.dx[at(n, ch, yy, xx, C, H, W)] += gv * w[at(o, ch, ki, kj, C, K, K)];
              }
        }
  return r;
}

}  // namespace

TEST_CASE("Kernels.Conv2d.MatchesDirectConvolution") {
  struct Case { int N, C, H, W, OC, K, s, p; };
  // The last two have >= 256 output pixels per image: the per-image GEMM path.
  for (Case c : {Case{2, 1, 8, 8, 3, 5, 1, 0}, Case{1, 3, 7, 9, 4, 3, 2, 1}, Case{3, 2, 5, 5, 2, 5, 1, 2},
                 Case{2, 2, 20, 20, 3, 3, 1, 0}, Case{2, 1, 30, 30, 2, 5, 1, 1},
                 // A ResNet's: 3x3 stride 2 pad 1 on even and odd planes, the 1x1 stride-2 shortcut,
                 // and a stride larger than the padding's reach.
                 Case{2, 2, 8, 8, 3, 3, 2, 1}, Case{1, 2, 7, 7, 2, 3, 2, 1}, Case{2, 3, 7, 7, 2, 1, 2, 0},
                 Case{1, 2, 9, 11, 2, 5, 3, 2}}) {
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

// The gradient of 2x2 pooling against a serial reference: the first maximum of each window in
// window order takes the output gradient. ReLU-like inputs with many ties, even planes (the
// windows tile the plane) and odd ones (the last row and column belong to no window), and a
// second pass accumulating into the first.
TEST_CASE("Kernels.MaxPool2d.BackwardRoutesToFirstMaximum") {
  for (auto [H, W] : {std::pair{6, 8}, std::pair{7, 5}}) {
    const int P = 3, OH = H / 2, OW = W / 2;
    auto x = ref::random_vector(static_cast<std::size_t>(P * H * W), 5);
    for (auto& v : x) v = v < 0 ? 0.0 : std::round(v * 2);  // many exact ties
    const auto gy = ref::random_vector(static_cast<std::size_t>(P * OH * OW), 6);
    std::vector<double> want(x.size(), 0.0);
    for (int p = 0; p < P; ++p)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          std::size_t at = static_cast<std::size_t>((p * H + 2 * i) * W + 2 * j);
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
              const auto k = static_cast<std::size_t>((p * H + 2 * i + a) * W + 2 * j + b);
              if (x[k] > x[at]) at = k;
            }
          want[at] += gy[static_cast<std::size_t>((p * OH + i) * OW + j)];
        }
    for (auto dt : {strata::DType::f64, strata::DType::f32}) {
      auto X = strata::from_vector<double>({1, P, H, W}, x, dt).requires_grad_();
      auto G = strata::from_vector<double>({1, P, OH, OW}, gy, dt);
      strata::backward(strata::max_pool2d(X, 2), G);
      auto dx = X.grad().to_vector<double>();
      for (std::size_t k = 0; k < want.size(); ++k) CHECK(dx[k] == doctest::Approx(want[k]).epsilon(1e-6));
      strata::backward(strata::max_pool2d(X, 2), G, strata::GradAccumulation::accumulate);
      dx = X.grad().to_vector<double>();
      for (std::size_t k = 0; k < want.size(); ++k) CHECK(dx[k] == doctest::Approx(2 * want[k]).epsilon(1e-6));
    }
  }
}

// Batches large enough that the column matrix is built in several chunks, the last one short
// (conv_chunk_images): forward and all three gradients, with the ReLU fused, against the
// definition in double. Both GEMM layouts: per image (24x24 outputs) and per chunk (8x8);
// the ResNet's 3x3 convolutions with padding at strides 1 and 2 onto rows of 14, 7 and 4
// pixels (the widths im2col copies at a constant length) and onto a row of 5 (it does not).
// The second backward pass adds to the first's gradients.
TEST_CASE("Kernels.Conv2d.ChunkedBatchesMatchTheDefinition") {
  struct Case { int N, C, H, W, OC, K, s, p; };
  for (const Case c : {Case{5, 16, 26, 26, 4, 3, 1, 0}, Case{5, 64, 12, 12, 6, 5, 1, 0}, Case{3, 120, 13, 13, 3, 3, 2, 1},
                       Case{5, 24, 14, 14, 4, 3, 1, 1}, Case{5, 24, 28, 28, 4, 3, 2, 1}, Case{5, 80, 7, 7, 4, 3, 1, 1},
                       Case{5, 80, 14, 14, 4, 3, 2, 1}, Case{5, 256, 4, 4, 3, 3, 1, 1}, Case{5, 256, 7, 7, 3, 3, 2, 1},
                       Case{5, 160, 5, 5, 3, 3, 1, 1},
                       // 1x1 at strides 2 and 3 without padding: the forward pass's columns are saved
                       Case{5, 200, 28, 28, 4, 1, 2, 0}, Case{5, 100, 40, 40, 3, 1, 2, 0}, Case{4, 400, 30, 30, 3, 1, 3, 0}}) {
    const int OH = (c.H + 2 * c.p - c.K) / c.s + 1, OW = (c.W + 2 * c.p - c.K) / c.s + 1;
    const auto geo = strata::kernels::cpu::ConvGeometry{c.N, c.C, c.H, c.W, c.K, c.K, c.s, c.p};
    REQUIRE(!strata::ops::detail::runs_winograd(geo, c.OC));  // (Kernels.Conv2d.Winograd* has those)
    REQUIRE(strata::ops::detail::conv_chunk_images(geo, sizeof(double)) < c.N);  // several chunks
    const auto x = ref::random_vector(static_cast<std::size_t>(c.N * c.C * c.H * c.W), 31);
    const auto w = ref::random_vector(static_cast<std::size_t>(c.OC * c.C * c.K * c.K), 32);
    const auto b = ref::random_vector(static_cast<std::size_t>(c.OC), 33);
    const auto gy = ref::random_vector(static_cast<std::size_t>(c.N * c.OC * OH * OW), 34);
    auto [y, dx, dw, db] = relu_conv_ref(x, w, b, gy, c.N, c.C, c.H, c.W, c.OC, c.K, c.s, c.p);
    auto X = strata::from_vector<double>({c.N, c.C, c.H, c.W}, x, strata::DType::f64).requires_grad_();
    auto Wt = strata::from_vector<double>({c.OC, c.C, c.K, c.K}, w, strata::DType::f64).requires_grad_();
    auto B = strata::from_vector<double>({c.OC}, b, strata::DType::f64).requires_grad_();
    auto out = strata::conv2d(X, Wt, B, c.s, c.p, strata::Activation::relu);
    CHECK(ref::max_rel_diff(out.to_vector<double>(), y) < 1e-12);
    strata::backward(out, strata::from_vector<double>(out.shape(), gy, strata::DType::f64));
    CHECK(ref::max_rel_diff(X.grad().to_vector<double>(), dx) < 1e-12);
    CHECK(ref::max_rel_diff(Wt.grad().to_vector<double>(), dw) < 1e-12);
    CHECK(ref::max_rel_diff(B.grad().to_vector<double>(), db) < 1e-12);
    out = strata::conv2d(X, Wt, B, c.s, c.p, strata::Activation::relu);
    strata::backward(out, strata::from_vector<double>(out.shape(), gy, strata::DType::f64),
                     strata::GradAccumulation::accumulate);
    for (auto& v : dx) v *= 2;
    for (auto& v : dw) v *= 2;
    CHECK(ref::max_rel_diff(X.grad().to_vector<double>(), dx) < 1e-12);
    CHECK(ref::max_rel_diff(Wt.grad().to_vector<double>(), dw) < 1e-12);
  }
}

// 3x3 convolutions at stride 1 with 16 channels or more in and out go by Winograd's F(2x2, 3x3)
// (kernels/cpu/winograd.hpp): forward and all three gradients, bias and ReLU fused, against the
// definition in double, and in float within a few units of float's rounding of the sums'
// magnitude. Paddings 0, 1 and 2; planes of even and odd sides (the last tiles hang over), of
// one pixel, wider than tall; the ResNet's planes (14, 7, 4); several chunks of images and the
// per-image weight-gradient GEMMs (16x16 outputs). The second backward pass adds to the
// first's gradients. Under STRATA_CONV=im2col (tests/meson.build) the same cases hold the
// im2col path to the same bounds.
TEST_CASE("Kernels.Conv2d.WinogradMatchesTheDefinition") {
  struct Case { int N, C, H, W, OC, p; };
  for (const Case c : {Case{3, 16, 14, 14, 16, 1}, Case{5, 32, 7, 7, 24, 1}, Case{4, 64, 4, 4, 32, 1},
                       Case{2, 16, 9, 6, 20, 0}, Case{2, 17, 5, 8, 16, 2}, Case{3, 16, 1, 1, 16, 1},
                       Case{2, 16, 3, 3, 16, 0}, Case{2, 16, 16, 16, 16, 1}, Case{40, 32, 14, 14, 32, 1}}) {
    CAPTURE(c.N);
    CAPTURE(c.C);
    CAPTURE(c.H);
    CAPTURE(c.W);
    CAPTURE(c.p);
    const int OH = c.H + 2 * c.p - 2, OW = c.W + 2 * c.p - 2;
    const auto geo = strata::kernels::cpu::ConvGeometry{c.N, c.C, c.H, c.W, 3, 3, 1, c.p};
    CHECK(strata::ops::detail::runs_winograd(geo, c.OC) == strata::kernels::cpu::winograd::enabled());
    const auto x = ref::random_vector(static_cast<std::size_t>(c.N * c.C * c.H * c.W), 41);
    const auto w = ref::random_vector(static_cast<std::size_t>(c.OC * c.C * 9), 42);
    const auto b = ref::random_vector(static_cast<std::size_t>(c.OC), 43);
    const auto gy = ref::random_vector(static_cast<std::size_t>(c.N * c.OC * OH * OW), 44);
    auto [y, dx, dw, db] = relu_conv_ref(x, w, b, gy, c.N, c.C, c.H, c.W, c.OC, 3, 1, c.p);
    for (auto dt : {strata::DType::f64, strata::DType::f32}) {
      CAPTURE(dt);
      // Bounds on the largest error against the largest value: float64's rounding, or float's
      // over sums of up to 9 C terms of magnitude about 1.
      const double tol = dt == strata::DType::f64 ? 1e-12 : 2e-5;
      const auto close = [&](const strata::Tensor& t, const std::vector<double>& want, double scale) {
        const auto got = t.to_vector<double>();
        double err = 0, mag = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
          err = std::max(err, std::abs(got[i] - scale * want[i]));
          mag = std::max(mag, std::abs(scale * want[i]));
        }
        return err <= tol * mag;
      };
      auto X = strata::from_vector<double>({c.N, c.C, c.H, c.W}, x, dt).requires_grad_();
      auto Wt = strata::from_vector<double>({c.OC, c.C, 3, 3}, w, dt).requires_grad_();
      auto B = strata::from_vector<double>({c.OC}, b, dt).requires_grad_();
      auto out = strata::conv2d(X, Wt, B, 1, c.p, strata::Activation::relu);
      CHECK(close(out, y, 1));
      const auto G = strata::from_vector<double>(out.shape(), gy, dt);
      strata::backward(out, G);
      CHECK(close(X.grad(), dx, 1));
      CHECK(close(Wt.grad(), dw, 1));
      CHECK(close(B.grad(), db, 1));
      out = strata::conv2d(X, Wt, B, 1, c.p, strata::Activation::relu);
      strata::backward(out, G, strata::GradAccumulation::accumulate);
      CHECK(close(X.grad(), dx, 2));
      CHECK(close(Wt.grad(), dw, 2));
      // Without bias and activation: the plain convolution.
      const auto plain = conv_ref(x, w, std::vector<double>(b.size(), 0.0), c.N, c.C, c.H, c.W, c.OC, 3, 1, c.p);
      CHECK(close(strata::conv2d(X.detach(), Wt.detach(), {}, 1, c.p), plain, 1));
    }
  }
}

// The AVX-512 permutes against the row kernels, on every geometry a plan covers and on ones
// it cannot (windows past 64 floats: the row kernels run): im2col the same floats; col2im the
// same sums (bit for bit where it overwrites; accumulating, the row kernels at strides above 1
// add the taps' sum to dx rather than tap by tap). Batches of 1 to 6 images (the permutes
// take 4 at a time), planes whose pixel count is and is not a multiple of 16.
TEST_CASE("Kernels.Conv2d.Im2colPermutesMatchTheRowKernels") {
  namespace k = strata::kernels::cpu;
  struct Case { std::int64_t n, c, h, w, kh, kw, s, p; bool planned; };
  for (const Case& t : {Case{3, 2, 14, 14, 3, 3, 1, 1, true}, Case{5, 3, 28, 28, 3, 3, 2, 1, true}, Case{2, 2, 28, 28, 1, 1, 2, 0, true},
                       Case{6, 2, 7, 7, 3, 3, 2, 1, true}, Case{1, 4, 4, 4, 3, 3, 1, 1, true}, Case{4, 1, 28, 28, 3, 3, 1, 1, true},
                       Case{2, 2, 12, 12, 5, 5, 1, 0, true}, Case{3, 2, 9, 11, 5, 5, 3, 2, false}, Case{2, 1, 5, 3, 3, 2, 1, 2, true},
                       Case{2, 2, 20, 40, 3, 3, 2, 1, false}, Case{1, 1, 10, 70, 1, 1, 3, 0, false}}) {
    CAPTURE(t.h);
    CAPTURE(t.w);
    CAPTURE(t.s);
    const k::ConvGeometry g{t.n, t.c, t.h, t.w, t.kh, t.kw, t.s, t.p};
#ifdef STRATA_IM2COL_AVX512
    CHECK(k::im2col_avx512::plan_for(g).usable == t.planned);
#endif
    const auto xs = ref::random_vector(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 41);
    const auto cs = ref::random_vector(static_cast<std::size_t>(g.rows() * g.cols()), 42);
    const std::vector<float> x(xs.begin(), xs.end()), cols_in(cs.begin(), cs.end());
    std::vector<float> pad(static_cast<std::size_t>(k::padded_elements(g)) + 1);
    std::vector<float> cols(cols_in.size(), -9.0f), want_cols(cols_in.size(), -7.0f);
    k::im2col<float>(g, x.data(), cols.data(), pad.data());
    k::detail::im2col_by_rows<float>(g, x.data(), want_cols.data(), pad.data());
    CHECK(cols == want_cols);
    for (const bool accumulate : {false, true}) {
      CAPTURE(accumulate);
      std::vector<float> dx(x.begin(), x.end()), want_dx(x.begin(), x.end());
      k::col2im<float>(g, cols_in.data(), dx.data(), accumulate, pad.data());
      k::detail::col2im_by_rows<float>(g, cols_in.data(), want_dx.data(), accumulate, pad.data());
      if (!accumulate || t.s == 1) {
        CHECK(dx == want_dx);
      } else {
        double worst = 0;
        for (std::size_t i = 0; i < dx.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(dx[i]) - want_dx[i]));
        CHECK(worst < 1e-5);
      }
    }
  }
}

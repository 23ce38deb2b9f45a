// The precision policy (precision/policy.hpp): its names and scopes, and the host products of
// linear layers, matmul and im2col convolutions under bfloat16, forward and backward, against
// float64 over the operands rounded to bfloat16 (the products exact, the sums float32's error).
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <strata/strata.hpp>

#include "support/reference.hpp"

using strata::Tensor;
namespace precision = strata::precision;

namespace {

std::vector<double> rounded(const Tensor& t) {
  std::vector<double> v;
  for (float x : t.to_vector<float>()) v.push_back(strata::kernels::math::round_to_bf16(x));
  return v;
}

// |got - want| within about k units of float's last place of `scale`, element by element.
void check_within_float_sums(const Tensor& got_t, const std::vector<double>& want, const std::vector<double>& scale,
                             std::int64_t depth) {
  const auto got = got_t.to_vector<float>();
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = std::ldexp(static_cast<double>(depth + 4), -24) * scale[i] + 1e-30;
    worst = std::max(worst, std::abs(got[i] - want[i]) / bound);
  }
  CHECK(worst <= 1.0);
}

// Row-major C[m, n] = op(A) op(B) and each element's sum of |products|, in float64.
struct Product {
  std::vector<double> value, scale;
};
Product product(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const std::vector<double>& a,
                const std::vector<double>& b) {
  const auto magnitudes = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    return v;
  };
  return {ref::matmul(ta, tb, m, n, k, a, b), ref::matmul(ta, tb, m, n, k, magnitudes(a), magnitudes(b))};
}

double max_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
  return worst;
}

}  // namespace

TEST_CASE("Precision.Policy.NamesAndScopes") {
  CHECK(precision::current() == precision::float32);
  CHECK(precision::from_name("bf16") == precision::bfloat16);
  CHECK(precision::from_name("bfloat16") == precision::bfloat16);
  CHECK(precision::from_name("fp32") == precision::float32);
  CHECK(std::string(precision::name_of(precision::bfloat16)) == "bf16");
  CHECK_THROWS_WITH_AS(precision::from_name("fp8"), doctest::Contains("precision 'fp8' is none of fp32"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(precision::Scope(precision::Policy{strata::DType::f64}),
                       doctest::Contains("compute type float64 is none of float32, bfloat16"), strata::invalid_argument);
  {
    const precision::Scope outer(precision::bfloat16);
    CHECK(precision::current() == precision::bfloat16);
    {
      const precision::Scope inner(precision::float32);
      CHECK(precision::current() == precision::float32);
    }
    CHECK(precision::current() == precision::bfloat16);
  }
  CHECK(precision::current() == precision::float32);
}

TEST_CASE("Precision.Bf16.LinearForwardAndBackward") {
  // y = x Wᵀ + b, then loss = sum(y * r): dy = r, dx = dy W, dW = dyᵀ x, db = column sums of dy.
  const std::int64_t N = 37, I = 70, O = 45;
  strata::Generator g(3);
  const Tensor x0 = strata::uniform({N, I}, -1, 1, g), w0 = strata::uniform({O, I}, -1, 1, g);
  const Tensor b0 = strata::uniform({O}, -1, 1, g), r = strata::uniform({N, O}, -1, 1, g);
  auto run = [&](strata::Activation act) {
    std::vector<Tensor> params{x0.clone().requires_grad_(), w0.clone().requires_grad_(), b0.clone().requires_grad_()};
    const Tensor y = strata::linear(params[0], params[1], params[2], act);
    const auto grads = strata::grad(strata::sum(y * r), params);
    return std::vector<Tensor>{y, grads[0], grads[1], grads[2]};
  };
  const auto f32 = run(strata::Activation::none);
  const precision::Scope bf16(precision::bfloat16);
  const auto got = run(strata::Activation::none);
  const auto x = rounded(x0), w = rounded(w0), dy = rounded(r);
  Product y = product(false, true, N, O, I, x, w);
  const auto b = b0.to_vector<float>();
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < O; ++j) {
      y.value[static_cast<std::size_t>(i * O + j)] += b[static_cast<std::size_t>(j)];
      y.scale[static_cast<std::size_t>(i * O + j)] += std::abs(b[static_cast<std::size_t>(j)]);
    }
  check_within_float_sums(got[0], y.value, y.scale, I);
  const Product dx = product(false, false, N, I, O, dy, w), dw = product(true, false, O, I, N, dy, x);
  check_within_float_sums(got[1], dx.value, dx.scale, O);
  check_within_float_sums(got[2], dw.value, dw.scale, N);
  // The bias gradient sums the float gradient, not its rounding.
  const auto rv = r.to_vector<float>();
  std::vector<double> db(static_cast<std::size_t>(O)), db_scale(static_cast<std::size_t>(O));
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < O; ++j) {
      db[static_cast<std::size_t>(j)] += rv[static_cast<std::size_t>(i * O + j)];
      db_scale[static_cast<std::size_t>(j)] += std::abs(rv[static_cast<std::size_t>(i * O + j)]);
    }
  check_within_float_sums(got[3], db, db_scale, N);
  // The policy took effect: bfloat16's products are not float32's.
  CHECK(max_difference(got[0], f32[0]) > 1e-3);
  CHECK(max_difference(got[2], f32[2]) > 1e-3);
}

TEST_CASE("Precision.Bf16.BatchedMatmulForwardAndBackward") {
  // c [B, M, N] = a [B, M, K] bᵀ (b [B, N, K] seen through a transposed view), loss = sum(c * r).
  const std::int64_t B = 3, M = 13, K = 33, N = 20;
  strata::Generator g(4);
  const Tensor a0 = strata::uniform({B, M, K}, -1, 1, g), b0 = strata::uniform({B, N, K}, -1, 1, g);
  const Tensor r = strata::uniform({B, M, N}, -1, 1, g);
  const precision::Scope bf16(precision::bfloat16);
  std::vector<Tensor> params{a0.clone().requires_grad_(), b0.clone().requires_grad_()};
  const Tensor c = strata::matmul(params[0], strata::transpose(params[1], 1, 2));
  const auto grads = strata::grad(strata::sum(c * r), params);
  const auto a = rounded(a0), b = rounded(b0), dc = rounded(r);
  std::vector<double> cw, cs, daw, das, dbw, dbs;
  for (std::int64_t e = 0; e < B; ++e) {
    const auto slice = [&](const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
      return std::vector<double>(v.begin() + e * rows * cols, v.begin() + (e + 1) * rows * cols);
    };
    const auto ae = slice(a, M, K), be = slice(b, N, K), ge = slice(dc, M, N);
    const Product ce = product(false, true, M, N, K, ae, be), dae = product(false, false, M, K, N, ge, be),
                  dbe = product(true, false, N, K, M, ge, ae);
    cw.insert(cw.end(), ce.value.begin(), ce.value.end()), cs.insert(cs.end(), ce.scale.begin(), ce.scale.end());
    daw.insert(daw.end(), dae.value.begin(), dae.value.end()), das.insert(das.end(), dae.scale.begin(), dae.scale.end());
    dbw.insert(dbw.end(), dbe.value.begin(), dbe.value.end()), dbs.insert(dbs.end(), dbe.scale.begin(), dbe.scale.end());
  }
  check_within_float_sums(c, cw, cs, K);
  check_within_float_sums(grads[0], daw, das, N);
  check_within_float_sums(grads[1], dbw, dbs, M);
}

TEST_CASE("Precision.Bf16.Im2colConvolutionMatchesItsRoundedProducts") {
  // A 3x3 convolution of 3 channels (im2col and GEMMs, not Winograd's 16-channel path): under
  // bfloat16 its output and gradients are the float32 convolution of the rounded operands,
  // within the float sums' error.
  strata::Generator g(5);
  const Tensor x0 = strata::uniform({2, 3, 9, 9}, -1, 1, g), w0 = strata::uniform({8, 3, 3, 3}, -1, 1, g);
  const Tensor r = strata::uniform({2, 8, 9, 9}, -1, 1, g);
  auto run = [&](const Tensor& x_in, const Tensor& w_in, const Tensor& weights) {
    std::vector<Tensor> params{x_in.clone().requires_grad_(), w_in.clone().requires_grad_()};
    const Tensor y = strata::conv2d(params[0], params[1], {}, 1, 1);
    const auto grads = strata::grad(strata::sum(y * weights), params);
    return std::vector<Tensor>{y, grads[0], grads[1]};
  };
  const auto to_bf16 = [](const Tensor& t) {
    Tensor out = t.clone();
    float* p = out.data<float>();
    for (std::int64_t i = 0; i < out.numel(); ++i) p[i] = strata::kernels::math::round_to_bf16(p[i]);
    return out;
  };
  // The reference: float64 over the rounded operands (the products' inputs; the output
  // gradient is what the backward GEMMs round), and the same over their magnitudes, each
  // output's sum of |products|: the scale of its float32 error.
  const auto reference = [&](bool magnitudes) {
    const auto in = [&](const Tensor& t) {
      Tensor d = strata::to_dtype(to_bf16(t), strata::DType::f64);
      if (magnitudes)
        for (std::int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = std::abs(d.data<double>()[i]);
      return d;
    };
    std::vector<Tensor> params{in(x0).requires_grad_(), in(w0).requires_grad_()};
    const Tensor y = strata::conv2d(params[0], params[1], {}, 1, 1);
    const auto grads = strata::grad(strata::sum(y * in(r)), params);
    return std::vector<Tensor>{y, grads[0], grads[1]};
  };
  const auto want = reference(false), scale = reference(true);
  const precision::Scope bf16(precision::bfloat16);
  const auto got = run(x0, w0, r);
  const std::int64_t depth[] = {3 * 9, 8 * 9, 2 * 81};  // products per output of y, dx, dw
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    check_within_float_sums(got[i], want[i].to_vector<double>(), scale[i].to_vector<double>(), depth[i]);
  }
  const precision::Scope back(precision::float32);
  CHECK(max_difference(run(x0, w0, r)[2], got[2]) > 1e-3);  // the policy took effect
}

TEST_CASE("Precision.SixteenBit.WinogradConvolutionOnTheSixteenBitGemm") {
  // A 3x3 convolution of 16 channels at stride 1 goes by Winograd's F(2x2, 3x3); under a 16-bit
  // policy its 16 GEMMs are that type's (host_gemm), forward and backward: the output and both
  // gradients are the kernels' Winograd over gemm_bf16 (gemm_f16) bit for bit, within the
  // type's rounding of the float64 convolution, and not float32's.
  namespace cpu = strata::kernels::cpu;
  namespace wg = strata::kernels::cpu::winograd;
  const std::int64_t N = 3, C = 16, H = 7, K = 24;
  const cpu::ConvGeometry geo{N, C, H, H, 3, 3, 1, 1}, adjoint{N, K, H, H, 3, 3, 1, 1};
  REQUIRE(strata::ops::detail::runs_winograd(geo, K));
  strata::Generator g(6);
  const Tensor x0 = strata::uniform({N, C, H, H}, -1, 1, g), w0 = strata::uniform({K, C, 3, 3}, -1, 1, g);
  const Tensor b0 = strata::uniform({K}, -1, 1, g), r = strata::uniform({N, K, H, H}, -1, 1, g);
  auto run = [&](strata::DType dt) {
    std::vector<Tensor> params{strata::to_dtype(x0, dt).requires_grad_(), strata::to_dtype(w0, dt).requires_grad_()};
    const Tensor y = strata::conv2d(params[0], params[1], strata::to_dtype(b0, dt), 1, 1);
    const auto grads = strata::grad(strata::sum(y * strata::to_dtype(r, dt)), params);
    return std::vector<Tensor>{y, grads[0], grads[1]};
  };
  const auto definition = run(strata::DType::f64), f32 = run(strata::DType::f32);
  struct Case {
    precision::Policy policy;
    wg::Product<float> gemm;
    double tol;  // the largest error over the largest value: a few units of the type's rounding
  };
  for (const Case c : {Case{precision::bfloat16, &cpu::gemm_bf16, 0x1p-6}, Case{precision::float16, &cpu::gemm_f16, 0x1p-9}}) {
    CAPTURE(precision::name_of(c.policy));
    const precision::Scope scope(c.policy);
    const auto got = run(strata::DType::f32);
    // The same by the kernels, their GEMMs given.
    Tensor y = Tensor::empty({N, K, H, H}), dx = Tensor::empty({N, C, H, H}), dw = Tensor::empty({K, C, 3, 3});
    Tensor u = Tensor::empty({wg::kEntries, K, C}),
           ws = Tensor::empty({std::max({wg::workspace_elements(geo, K, 4), wg::workspace_elements(adjoint, C, 4),
                                         wg::filter_gradient_workspace(geo, K, 4)})});
    wg::filter_transform<float>(K, C, w0.data<float>(), false, u.data<float>());
    wg::convolve<float>(geo, K, x0.data<float>(), u.data<float>(), b0.data<float>(), false, false, y.data<float>(),
                        ws.data<float>(), c.gemm);
    wg::filter_transform<float>(C, K, w0.data<float>(), true, u.data<float>());
    wg::convolve<float>(adjoint, C, r.data<float>(), u.data<float>(), nullptr, false, false, dx.data<float>(),
                        ws.data<float>(), c.gemm);
    wg::filter_gradient<float>(geo, K, x0.data<float>(), r.data<float>(), false, dw.data<float>(), ws.data<float>(),
                               c.gemm);
    const Tensor want[] = {y, dx, dw};
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(got[i].to_vector<float>() == want[i].to_vector<float>());
      const auto exact = definition[i].to_vector<double>();
      double largest = 0;
      for (double v : exact) largest = std::max(largest, std::abs(v));
      const auto f = [&](const Tensor& t) {  // the largest error against the definition, over its largest value
        const auto v = t.to_vector<double>();
        double worst = 0;
        for (std::size_t j = 0; j < v.size(); ++j) worst = std::max(worst, std::abs(v[j] - exact[j]));
        return worst / largest;
      };
      CHECK(f(got[i]) <= c.tol);
      CHECK(f(got[i]) > 16 * f(f32[i]));  // the policy took effect
    }
  }
}

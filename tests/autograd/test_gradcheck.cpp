// Every differentiable op, checked against central finite differences in float64.
#include "doctest.hpp"

#include <functional>
#include <vector>

#include <strata/strata.hpp>

#include "support/gradcheck.hpp"

using strata::Tensor;
using support::expect_gradients_match;
using support::Inputs;
using support::var;

TEST_CASE("Autograd.Gradcheck.BinaryWithBroadcasting") {
  const Inputs in{var({3, 1, 4}, 1), var({2, 1}, 2, 0.5, 1.5)};
  expect_gradients_match("add", [](const Inputs& v) { return v[0] + v[1]; }, in);
  expect_gradients_match("sub", [](const Inputs& v) { return v[0] - v[1]; }, in);
  expect_gradients_match("mul", [](const Inputs& v) { return v[0] * v[1]; }, in);
  expect_gradients_match("div", [](const Inputs& v) { return v[0] / v[1]; }, in);
  const Inputs same{var({2, 3}, 3), var({2, 3}, 4, 0.5, 1.5)};
  expect_gradients_match("mul same shape", [](const Inputs& v) { return v[0] * v[1]; }, same);
  expect_gradients_match("x*x (one input twice)", [](const Inputs& v) { return v[0] * v[0]; }, {var({5}, 5)});
}

TEST_CASE("Autograd.Gradcheck.Unary") {
  expect_gradients_match("neg", [](const Inputs& v) { return -v[0]; }, {var({2, 3}, 6)});
  expect_gradients_match("relu", [](const Inputs& v) { return strata::relu(v[0]); }, {var({2, 3}, 7)});
  expect_gradients_match("exp", [](const Inputs& v) { return strata::exp(v[0]); }, {var({2, 3}, 8)});
  expect_gradients_match("log", [](const Inputs& v) { return strata::log(v[0]); }, {var({2, 3}, 9, 0.5, 2)});
  expect_gradients_match("tanh", [](const Inputs& v) { return strata::tanh(v[0]); }, {var({2, 3}, 10)});
  expect_gradients_match("sigmoid", [](const Inputs& v) { return strata::sigmoid(v[0]); }, {var({2, 3}, 11)});
  expect_gradients_match("pow", [](const Inputs& v) { return strata::pow(v[0], 3.0); }, {var({2, 3}, 12, 0.5, 2)});
  expect_gradients_match("scalar ops", [](const Inputs& v) { return (v[0] * 3.0 + 2.0) / 4.0; }, {var({4}, 13)});
}

TEST_CASE("Autograd.Gradcheck.ReductionsAndShapes") {
  expect_gradients_match("sum", [](const Inputs& v) { return strata::sum(v[0]); }, {var({2, 3, 2}, 14)});
  expect_gradients_match("sum axis", [](const Inputs& v) { return strata::sum(v[0], {1}); }, {var({2, 3, 2}, 15)});
  expect_gradients_match("sum keepdim", [](const Inputs& v) { return strata::sum(v[0], {0, 2}, true); }, {var({2, 3, 2}, 16)});
  expect_gradients_match("mean", [](const Inputs& v) { return strata::mean(v[0]); }, {var({3, 4}, 17)});
  expect_gradients_match("mean axis", [](const Inputs& v) { return strata::mean(v[0], {-1}); }, {var({3, 4}, 18)});
  expect_gradients_match("reshape", [](const Inputs& v) { return strata::reshape(v[0], {3, -1}) * 2.0; }, {var({2, 6}, 19)});
  expect_gradients_match("flatten", [](const Inputs& v) { return strata::flatten(v[0]); }, {var({2, 2, 3}, 20)});
}

TEST_CASE("Autograd.Gradcheck.MatmulAndLinear") {
  expect_gradients_match("matmul", [](const Inputs& v) { return strata::matmul(v[0], v[1]); }, {var({3, 4}, 21), var({4, 2}, 22)});
  const Inputs lin{var({3, 4}, 23), var({5, 4}, 24), var({5}, 25)};
  expect_gradients_match("linear", [](const Inputs& v) { return strata::linear(v[0], v[1], v[2]); }, lin);
  expect_gradients_match("linear+relu",
                         [](const Inputs& v) { return strata::linear(v[0], v[1], v[2], strata::Activation::relu); }, lin);
  expect_gradients_match("linear, no bias", [](const Inputs& v) { return strata::linear(v[0], v[1]); },
                         {var({3, 4}, 26), var({2, 4}, 27)});
}

TEST_CASE("Autograd.Gradcheck.ConvAndPool") {
  const Inputs conv{var({2, 2, 5, 5}, 28), var({3, 2, 3, 3}, 29), var({3}, 30)};
  expect_gradients_match("conv2d", [](const Inputs& v) { return strata::conv2d(v[0], v[1], v[2]); }, conv);
  expect_gradients_match("conv2d stride 2 pad 1 relu", [](const Inputs& v) {
    return strata::conv2d(v[0], v[1], v[2], 2, 1, strata::Activation::relu);
  }, conv);
  // 16x16 = 256 output pixels per image: the per-image GEMM path.
  const Inputs big{var({2, 1, 18, 18}, 38), var({2, 1, 3, 3}, 39), var({2}, 40)};
  expect_gradients_match("conv2d per-image GEMMs, relu", [](const Inputs& v) {
    return strata::conv2d(v[0], v[1], v[2], 1, 0, strata::Activation::relu);
  }, big);
  expect_gradients_match("max_pool2d", [](const Inputs& v) { return strata::max_pool2d(v[0], 2); }, {var({2, 2, 4, 6}, 31)});
  expect_gradients_match("max_pool2d 3/2 pad 1", [](const Inputs& v) { return strata::max_pool2d(v[0], 3, 2, 1); },
                         {var({1, 2, 5, 5}, 32)});
}

TEST_CASE("Autograd.Gradcheck.SoftmaxLosses") {
  expect_gradients_match("log_softmax", [](const Inputs& v) { return strata::log_softmax(v[0]); }, {var({3, 5}, 33, -3, 3)});
  const Tensor labels = strata::from_vector<std::int64_t>({4}, {0, 3, 2, 3});
  for (auto r : {strata::nn::Reduction::mean, strata::nn::Reduction::sum, strata::nn::Reduction::sum_over_global_batch})
    expect_gradients_match("cross_entropy", [&](const Inputs& v) { return strata::nn::cross_entropy(v[0], labels, r, 8); },
                           {var({4, 4}, 34, -3, 3)});
  // Cross-entropy equals -mean(log_softmax at the label): two independent paths agree.
  Tensor x = var({4, 4}, 35);
  const double fused = strata::nn::cross_entropy(x, labels).item();
  const auto ls = strata::log_softmax(x).to_vector<double>();
  const double composed = -(ls[0] + ls[4 + 3] + ls[8 + 2] + ls[12 + 3]) / 4.0;
  CHECK(fused == doctest::Approx(composed).epsilon(1e-12));
  // Stable for huge logits.
  Tensor big = strata::from_vector<double>({1, 3}, {1000, 0, -1000}, strata::DType::f64);
  CHECK(strata::nn::cross_entropy(big, strata::from_vector<std::int64_t>({1}, {0})).item() == doctest::Approx(0.0));
  CHECK_THROWS_AS(strata::nn::cross_entropy(big, strata::from_vector<std::int64_t>({1}, {3})), strata::invalid_argument);
}

TEST_CASE("Autograd.Gradcheck.Dropout") {
  expect_gradients_match("dropout", [](const Inputs& v) {
    strata::Generator g(42);  // the same mask on every evaluation
    return strata::dropout(v[0], 0.4, g);
  }, {var({3, 4}, 36)});
}

TEST_CASE("Autograd.Gradcheck.KeyedDropout") {
  expect_gradients_match("keyed dropout", [](const Inputs& v) {
    return strata::dropout(v[0], 0.4, strata::DropoutKey{7, 3, 100});  // a pure function of the key
  }, {var({5, 6}, 37)});
}

namespace {
// A deliberately wrong backward (twice the true gradient of identity-like scaling).
void wrong_backward(strata::autograd::Node& n, std::uint64_t epoch) {
  auto s = strata::autograd::grad_slot(n.in[0], epoch);
  const double* g = strata::autograd::grad_output(n).data<double>();
  double* d = s.dst.data<double>();
  for (std::int64_t i = 0; i < n.out.numel(); ++i) d[i] = (s.accumulate ? d[i] : 0.0) + 2.0 * g[i];
}
}  // namespace

TEST_CASE("Autograd.Gradcheck.DetectsAWrongGradient") {
  auto bad = [](const Inputs& v) {
    Tensor out = v[0].detach().clone();
    strata::autograd::record("bad", &wrong_backward, out, v[0]);
    return out;
  };
  const auto r = strata::gradcheck(bad, {var({3}, 37)});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic 2") != std::string::npos);
}

// The ops under ResNets and Transformers, checked against central finite differences in
// float64: views, concatenation and slices, batched matmul, softmax, GELU, normalisation,
// embedding, average pooling and attention.
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include <strata/strata.hpp>

#include "support/gradcheck.hpp"

using strata::Tensor;
using support::expect_gradients_match;
using support::Inputs;
using support::var;

namespace {

// A fixed weight per output element, so that a gradient written to the wrong element shows.
Tensor weigh(const Tensor& y) {
  strata::Generator g(99);
  return y * strata::uniform(y.shape(), 0.5, 1.5, g, strata::DType::f64);
}

}  // namespace

TEST_CASE("Autograd.Gradcheck.Views") {
  expect_gradients_match("transpose", [](const Inputs& v) { return weigh(strata::transpose(v[0], 0, 2)); },
                         {var({2, 3, 4}, 1)});
  expect_gradients_match("permute", [](const Inputs& v) { return weigh(strata::permute(v[0], {2, 0, 1})); },
                         {var({2, 3, 4}, 2)});
  expect_gradients_match("permute then reshape (a copy)", [](const Inputs& v) {
    return weigh(strata::reshape(strata::permute(v[0], {1, 0, 2}), {3, -1}));
  }, {var({2, 3, 2}, 3)});
  expect_gradients_match("transpose used twice", [](const Inputs& v) {
    const Tensor t = strata::transpose(v[0], 0, 1);
    return weigh(t * t + t);
  }, {var({3, 2}, 4)});
  // Additions and reshapes hand their output gradient on to their first operand: here an
  // operand that other nodes also reach, before and after the hand-over, and x + x.
  expect_gradients_match("gradients handed on through add and reshape", [](const Inputs& v) {
    const Tensor h = v[0] * 2.0;
    const Tensor r = strata::reshape(h, {6});
    const Tensor y = r + strata::reshape(v[0], {6});
    const Tensor z = (y - r) * r + strata::reshape(h + h, {6});
    return weigh(z + y);
  }, {var({2, 3}, 5)});
}

TEST_CASE("Autograd.Gradcheck.ConcatSliceSplit") {
  expect_gradients_match("concat axis 0", [](const Inputs& v) { return weigh(strata::concat({v[0], v[1]}, 0)); },
                         {var({2, 3}, 5), var({1, 3}, 6)});
  expect_gradients_match("concat axis -1 of three", [](const Inputs& v) {
    return weigh(strata::concat({v[0], v[1], v[2]}, -1));
  }, {var({2, 1, 2}, 7), var({2, 1, 3}, 8), var({2, 1, 1}, 9)});
  expect_gradients_match("concat of five (folded nodes), one input twice", [](const Inputs& v) {
    return weigh(strata::concat({v[0], v[1], v[0], v[2], v[1]}, 1));
  }, {var({2, 2}, 10), var({2, 1}, 11), var({2, 3}, 12)});
  expect_gradients_match("concat of a transposed view", [](const Inputs& v) {
    return weigh(strata::concat({strata::transpose(v[0], 0, 1), v[1]}, 0));
  }, {var({3, 2}, 13), var({1, 3}, 14)});
  expect_gradients_match("slice (a view)", [](const Inputs& v) { return weigh(strata::slice(v[0], 0, 1, 3)); },
                         {var({4, 3}, 15)});
  expect_gradients_match("slice (a copy)", [](const Inputs& v) { return weigh(strata::slice(v[0], -1, 1, 3)); },
                         {var({2, 4}, 16)});
  expect_gradients_match("split, parts used apart", [](const Inputs& v) {
    const auto parts = strata::split(v[0], {1, 2, 1}, 1);
    return weigh(parts[0] * parts[2] + strata::sum(parts[1], {1}, true));
  }, {var({3, 4}, 17)});
}

TEST_CASE("Autograd.Gradcheck.BatchedMatmul") {
  const auto mm = [](const Inputs& v) { return weigh(strata::matmul(v[0], v[1])); };
  expect_gradients_match("3-D", mm, {var({2, 3, 4}, 18), var({2, 4, 2}, 19)});
  expect_gradients_match("4-D", mm, {var({2, 2, 2, 3}, 20), var({2, 2, 3, 2}, 21)});
  expect_gradients_match("3-D times a shared 2-D", mm, {var({3, 2, 4}, 22), var({4, 3}, 23)});
  expect_gradients_match("a shared 2-D times 3-D", mm, {var({2, 4}, 24), var({3, 4, 2}, 25)});
  expect_gradients_match("a transposed view (no copy)", [](const Inputs& v) {
    return weigh(strata::matmul(v[0], strata::transpose(v[1], -1, -2)));
  }, {var({2, 3, 4}, 26), var({2, 5, 4}, 27)});
  expect_gradients_match("a transposed first operand", [](const Inputs& v) {
    return weigh(strata::matmul(strata::transpose(v[0], -1, -2), v[1]));
  }, {var({2, 4, 3}, 28), var({2, 4, 2}, 29)});
  expect_gradients_match("heads as a permuted view", [](const Inputs& v) {
    const Tensor q = strata::permute(strata::reshape(v[0], {2, 3, 2, 2}), {0, 2, 1, 3});  // [B, H, T, D] over [B, T, H, D]
    return weigh(strata::matmul(q, strata::transpose(q, -1, -2)));
  }, {var({2, 3, 4}, 30)});
  expect_gradients_match("linear over leading axes", [](const Inputs& v) {
    return weigh(strata::linear(v[0], v[1], v[2]));
  }, {var({2, 3, 4}, 31), var({5, 4}, 32), var({5}, 33)});
}

TEST_CASE("Autograd.Gradcheck.Vecdot") {
  expect_gradients_match("vecdot, same shapes", [](const Inputs& v) { return weigh(strata::vecdot(v[0], v[1])); },
                         {var({3, 4, 9}, 1), var({3, 4, 9}, 2)});
  expect_gradients_match("vecdot, one row against several",
                         [](const Inputs& v) { return weigh(strata::vecdot(v[0], v[1])); },
                         {var({3, 5, 10}, 3), var({3, 1, 10}, 4)});
  expect_gradients_match("vecdot, broadcast both ways and across ranks",
                         [](const Inputs& v) { return weigh(strata::vecdot(v[0], v[1])); },
                         {var({2, 1, 3}, 5), var({4, 3}, 6)});
  expect_gradients_match("vecdot of a tensor with itself", [](const Inputs& v) { return weigh(strata::vecdot(v[0], v[0])); },
                         {var({3, 6}, 11)});
  expect_gradients_match("vecdot, vectors", [](const Inputs& v) { return strata::vecdot(v[0], v[1]) * 1.5; },
                         {var({7}, 7), var({7}, 8)});
  expect_gradients_match("vecdot, a transposed view", [](const Inputs& v) {
    return weigh(strata::vecdot(strata::transpose(v[0], 0, 1), v[1]));
  }, {var({9, 4}, 9), var({4, 9}, 10)});
}

TEST_CASE("Ops.Vecdot.IsTheSumOfTheProductAndChecksItsOperands") {
  strata::Generator g(3);
  const Tensor a = strata::uniform({6, 5, 19}, -1, 1, g), b = strata::uniform({6, 1, 19}, -1, 1, g);
  const Tensor got = strata::vecdot(a, b), want = strata::sum(a * b, {2});
  REQUIRE(got.shape() == strata::Shape{6, 5});
  const auto x = got.to_vector<float>(), y = want.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i] == doctest::Approx(y[i]).epsilon(1e-5));
  CHECK(strata::vecdot(strata::zeros({2, 0}), strata::zeros({2, 0})).to_vector<float>() == std::vector<float>{0, 0});
  CHECK_THROWS_WITH_AS(strata::vecdot(a, strata::zeros({6, 5, 18})), doctest::Contains("vecdot: last extents differ"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::vecdot(a, strata::zeros({4, 1, 19})), doctest::Contains("broadcast"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::vecdot(a, strata::zeros({6, 5, 19}, strata::DType::f64)),
                       doctest::Contains("vecdot: dtypes differ"), strata::invalid_argument);
}

TEST_CASE("Autograd.Gradcheck.SoftmaxAndGelu") {
  expect_gradients_match("softmax", [](const Inputs& v) { return weigh(strata::softmax(v[0])); }, {var({3, 5}, 34, -3, 3)});
  expect_gradients_match("softmax axis 0", [](const Inputs& v) { return weigh(strata::softmax(v[0], 0)); },
                         {var({3, 2, 4}, 35, -3, 3)});
  expect_gradients_match("scaled causal softmax", [](const Inputs& v) {
    return weigh(strata::ops::detail::scaled_softmax(v[0], 0.5, 4));
  }, {var({2, 4, 4}, 36, -3, 3)});
  expect_gradients_match("gelu", [](const Inputs& v) { return strata::gelu(v[0]); }, {var({3, 4}, 37, -3, 3)});
}

TEST_CASE("Autograd.Gradcheck.Normalization") {
  expect_gradients_match("layer_norm", [](const Inputs& v) { return weigh(strata::layer_norm(v[0], v[1], v[2])); },
                         {var({2, 3, 5}, 38), var({5}, 39), var({5}, 40)});
  expect_gradients_match("layer_norm without affine", [](const Inputs& v) { return weigh(strata::layer_norm(v[0])); },
                         {var({4, 6}, 41)});
  const auto bn = [](bool training) {
    return [training](const Inputs& v) {
      const Tensor rm = strata::from_vector<double>({3}, {0.1, -0.2, 0.3}, strata::DType::f64);
      const Tensor rv = strata::from_vector<double>({3}, {1.5, 0.5, 2.0}, strata::DType::f64);
      return weigh(strata::batch_norm(v[0], v[1], v[2], rm, rv, training));
    };
  };
  expect_gradients_match("batch_norm [N, C] training", bn(true), {var({5, 3}, 42), var({3}, 43), var({3}, 44)});
  expect_gradients_match("batch_norm [N, C, H, W] training", bn(true), {var({2, 3, 2, 3}, 45), var({3}, 46), var({3}, 47)});
  expect_gradients_match("batch_norm evaluation", bn(false), {var({2, 3, 2, 2}, 48), var({3}, 49), var({3}, 50)});
  // ResNet's fusions: relu(bn(x)) and relu(bn(x) + residual), in training and evaluation.
  const auto bn_fused = [](bool training, bool residual) {
    return [training, residual](const Inputs& v) {
      const Tensor rm = strata::from_vector<double>({3}, {0.1, -0.2, 0.3}, strata::DType::f64);
      const Tensor rv = strata::from_vector<double>({3}, {1.5, 0.5, 2.0}, strata::DType::f64);
      return weigh(strata::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5, strata::BatchStatistics::per_replica,
                                      strata::Activation::relu, residual ? v[3] : Tensor()));
    };
  };
  expect_gradients_match("batch_norm + relu training", bn_fused(true, false),
                         {var({3, 3, 2, 3}, 51), var({3}, 52), var({3}, 53)});
  expect_gradients_match("batch_norm + residual + relu training", bn_fused(true, true),
                         {var({3, 3, 2, 3}, 54), var({3}, 55), var({3}, 56), var({3, 3, 2, 3}, 57)});
  expect_gradients_match("batch_norm + residual + relu evaluation", bn_fused(false, true),
                         {var({2, 3, 2, 2}, 58), var({3}, 59), var({3}, 60), var({2, 3, 2, 2}, 61)});
}

TEST_CASE("Ops.BatchNorm.FusedEqualsComposedAndKeepsDigitsOfALargeMean") {
  const Tensor x = var({4, 3, 5, 5}, 62), w = var({3}, 63), b = var({3}, 64), r = var({4, 3, 5, 5}, 65);
  const auto rm = strata::zeros({3}, strata::DType::f64), rv = strata::ones({3}, strata::DType::f64);
  const auto composed = strata::relu(strata::batch_norm(x, w, b, rm, rv, true) + r).to_vector<double>();
  const auto fused = strata::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, strata::BatchStatistics::per_replica,
                                        strata::Activation::relu, r)
                         .to_vector<double>();
  REQUIRE(fused.size() == composed.size());
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == doctest::Approx(composed[i]).epsilon(1e-12));
  // float32 values near 1000 with a spread near 0.3: the statistics must not cancel away the spread.
  strata::Generator g(66);
  const Tensor big = strata::add(strata::uniform({8, 2, 9, 9}, -0.5, 0.5, g, strata::DType::f64), 1000.0);
  const auto rm2 = strata::zeros({2}, strata::DType::f64), rv2 = strata::ones({2}, strata::DType::f64);
  const auto want = strata::batch_norm(big, {}, {}, rm2, rv2, true).to_vector<double>();
  const auto got = strata::batch_norm(strata::to_dtype(big, strata::DType::f32), {}, {}, strata::zeros({2}),
                                      strata::ones({2}), true)
                       .to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  CHECK(worst < 1e-3);
}

TEST_CASE("Autograd.Gradcheck.EmbeddingPoolingAttention") {
  const Tensor idx = strata::from_vector<std::int64_t>({2, 3}, {4, 0, 4, 1, 2, 4});  // repeats add up
  expect_gradients_match("embedding", [&](const Inputs& v) { return weigh(strata::embedding(v[0], idx)); },
                         {var({5, 3}, 51)});
  const auto rows = strata::TableGradient::row_sparse;
  expect_gradients_match("embedding, row-sparse", [&](const Inputs& v) { return weigh(strata::embedding(v[0], idx, rows)); },
                         {var({5, 3}, 51)});
  expect_gradients_match("embedding, row-sparse, looked up twice and used densely", [&](const Inputs& v) {
    const Tensor a = strata::embedding(v[0], idx, rows);
    const Tensor b = strata::embedding(v[0], strata::from_vector<std::int64_t>({2}, {3, 4}), rows);
    return weigh(strata::concat({strata::reshape(a, {-1}), strata::reshape(b, {-1}), strata::reshape(v[0] * v[0], {-1})}, 0));
  }, {var({5, 3}, 54)});
  expect_gradients_match("avg_pool2d", [](const Inputs& v) { return weigh(strata::avg_pool2d(v[0], 2)); },
                         {var({2, 2, 4, 4}, 52)});
  expect_gradients_match("avg_pool2d 3/2 pad 1", [](const Inputs& v) { return weigh(strata::avg_pool2d(v[0], 3, 2, 1)); },
                         {var({1, 2, 5, 5}, 53)});
  expect_gradients_match("conv2d 1x1 stride 2 (a shortcut)", [](const Inputs& v) {
    return weigh(strata::conv2d(v[0], v[1], Tensor(), 2, 0));
  }, {var({2, 2, 5, 5}, 64), var({3, 2, 1, 1}, 65)});
  expect_gradients_match("conv2d 5x5 stride 3 pad 2", [](const Inputs& v) {
    return weigh(strata::conv2d(v[0], v[1], Tensor(), 3, 2));
  }, {var({1, 2, 7, 8}, 66), var({2, 2, 5, 5}, 67)});
  // 3x3 at stride 1, 16 channels in and out: Winograd's F(2x2, 3x3), an odd plane (tiles hang over).
  expect_gradients_match("conv2d 3x3 pad 1, 16 channels (Winograd), relu", [](const Inputs& v) {
    return weigh(strata::conv2d(v[0], v[1], v[2], 1, 1, strata::Activation::relu));
  }, {var({2, 16, 3, 5}, 68), var({16, 16, 3, 3}, 69), var({16}, 70)});
  expect_gradients_match("global_avg_pool2d", [](const Inputs& v) { return weigh(strata::global_avg_pool2d(v[0])); },
                         {var({2, 3, 2, 3}, 54)});
  const auto attn = [](bool causal) {
    return [causal](const Inputs& v) { return weigh(strata::scaled_dot_product_attention(v[0], v[1], v[2], causal)); };
  };
  expect_gradients_match("attention", attn(false), {var({2, 3, 4}, 55), var({2, 3, 4}, 56), var({2, 3, 2}, 57)});
  expect_gradients_match("causal attention with heads", attn(true),
                         {var({1, 2, 4, 2}, 58), var({1, 2, 4, 2}, 59), var({1, 2, 4, 3}, 60)});
  expect_gradients_match("causal attention, fewer queries than keys", attn(true),
                         {var({1, 2, 3}, 61), var({1, 4, 3}, 62), var({1, 4, 2}, 63)});
  // Self-attention of heads packed in one projection, in one operation: more tokens than a
  // causal block (16), and not a multiple of it.
  for (bool causal : {false, true})
    expect_gradients_match(causal ? "self_attention, causal" : "self_attention", [causal](const Inputs& v) {
      return weigh(strata::ops::detail::self_attention(v[0], 2, causal));
    }, {var({2, 19, 12}, causal ? 73 : 72)});
  // The module: q, k and v as strided views of one projection, heads merged, projected.
  strata::Generator gen(70);
  strata::nn::MultiheadAttention mha(6, 3, true, true, gen, strata::DType::f64);
  expect_gradients_match("multi-head self-attention", [&](const Inputs& v) { return weigh(mha.forward(v[0])); },
                         {var({2, 4, 6}, 71)});
}

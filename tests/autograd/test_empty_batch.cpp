// An empty batch (a replica that the last batch of an epoch leaves no rows) gives zero
// gradients and a forward pass of zero rows, op by op and layer by layer: each is run on a
// batch with rows first, so a backward pass that wrote nothing would leave that step's
// gradient in the buffers, and the check would see it.
#include "doctest.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/models/char_transformer.hpp>
#include <strata/strata.hpp>

namespace {

using strata::Shape;
using strata::Tensor;

/// A loss whose gradient reaches every element of `out`: sum(out²) + sum(out).
Tensor squares_and_sum(const Tensor& out) { return strata::add(strata::sum(strata::mul(out, out)), strata::sum(out)); }

/// The gradients of `loss_of(rows)` with respect to `params`, as float64 vectors.
std::vector<std::vector<double>> gradients_of(const std::function<Tensor(std::int64_t)>& loss_of,
                                              const std::vector<Tensor>& params, std::int64_t rows) {
  const Tensor loss = loss_of(rows);
  const strata::Gradients g = strata::grad(loss, params);
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < g.size(); ++i) out.push_back(strata::to_dtype(g[i], strata::DType::f64).to_vector<double>());
  return out;
}

/// Runs `loss_of` on 3 rows (some gradient must be non-zero), then on none: every gradient
/// must be exactly zero (and finite).
void expect_empty_batch_zero(const char* what, const std::function<Tensor(std::int64_t)>& loss_of,
                             const std::vector<Tensor>& params) {
  INFO(std::string(what));
  REQUIRE(!params.empty());
  const auto full = gradients_of(loss_of, params, 3);
  double largest = 0;
  for (const auto& g : full)
    for (double v : g) largest = std::max(largest, std::fabs(v));
  REQUIRE(largest > 0);  // the batch with rows moved the gradients, so a stale one would show
  const auto empty = gradients_of(loss_of, params, 0);
  REQUIRE(empty.size() == params.size());
  for (std::size_t i = 0; i < empty.size(); ++i) {
    double worst = 0;
    for (double v : empty[i]) worst = std::isfinite(v) ? std::max(worst, std::fabs(v)) : INFINITY;
    INFO("parameter ", i, " of shape ", params[i].shape());
    CHECK(worst == 0.0);
  }
}

/// A module's loss on `rows` rows of inputs of shape [rows, rest...], uniform in [-1, 1);
/// the forward pass must give `rows` rows.
std::function<Tensor(std::int64_t)> module_loss(strata::nn::Module& m, Shape rest) {
  return [&m, rest](std::int64_t rows) {
    Shape s{rows};
    for (std::int64_t d : rest.dims()) s.push_back(d);
    strata::Generator g(static_cast<std::uint64_t>(rows) + 5);
    const Tensor out = m(strata::uniform(s, -1, 1, g));
    CHECK(out.dim(0) == rows);
    return squares_and_sum(out);
  };
}

void expect_module(const char* what, strata::nn::Module& m, Shape rest) {
  expect_empty_batch_zero(what, module_loss(m, rest), m.parameters());
}

}  // namespace

TEST_CASE("Autograd.EmptyBatch.LinearAndElementwise") {
  using namespace strata::nn;
  strata::manual_seed(1);
  Sequential m(Linear(6, 5), ReLU(), Linear(5, 4), GELU(), Linear(4, 4), Tanh(), Linear(4, 3), Sigmoid());
  expect_module("linear layers and activations", m, Shape{6});
}

TEST_CASE("Autograd.EmptyBatch.ConvolutionOnEveryPath") {
  using namespace strata::nn;
  strata::manual_seed(2);
  // per-image GEMMs (16x16 output planes), chunked GEMMs (8x8), the kept columns of a 1x1
  // convolution at stride 2, Winograd's F(2x2, 3x3) (3x3, stride 1, 16 channels in and out)
  Sequential per_image(Conv2d(2, 4, 3, 1, 1), ReLU());
  expect_module("conv2d, per-image GEMMs", per_image, Shape{2, 16, 16});
  Sequential chunked(Conv2d(2, 4, 3, 1, 1));
  expect_module("conv2d, chunked GEMMs", chunked, Shape{2, 8, 8});
  Sequential kept(Conv2d(2, 4, 1, 2, 0));
  expect_module("conv2d, kept columns", kept, Shape{2, 8, 8});
  Sequential winograd(Conv2d(16, 16, 3, 1, 1), ReLU());
  expect_module("conv2d, Winograd", winograd, Shape{16, 8, 8});
}

TEST_CASE("Autograd.EmptyBatch.PoolingAndNorms") {
  using namespace strata::nn;
  strata::manual_seed(3);
  Sequential pools(Conv2d(1, 4, 3, 1, 1), MaxPool2d(2), Conv2d(4, 4, 3, 1, 1), AvgPool2d(2), GlobalAvgPool2d(),
                   Linear(4, 2));
  expect_module("pooling", pools, Shape{1, 8, 8});
  Sequential norms(Conv2d(1, 4, 3, 1, 1), BatchNorm2d(4), ReLU(), Flatten(), Linear(64, 6), BatchNorm1d(6));
  expect_module("batch norms", norms, Shape{1, 4, 4});
  Sequential layer_norm(Linear(6, 8), LayerNorm(8));
  expect_module("layer norm", layer_norm, Shape{3, 6});
  Sequential block(BasicBlock(4, 8, 2), BasicBlock(8, 8, 1));
  expect_module("residual blocks", block, Shape{4, 8, 8});
  // (SyncBatchNorm over an empty global batch has no statistics: an error, tested in test_layers)
}

TEST_CASE("Autograd.EmptyBatch.EmptyBatchLeavesRunningStatistics") {
  strata::nn::BatchNorm1d bn(3);
  strata::Generator g(4);
  (void)bn(strata::uniform({5, 3}, -1, 1, g));
  const auto mean = bn.running_mean().to_vector<float>(), var = bn.running_var().to_vector<float>();
  const Tensor out = bn(strata::uniform({0, 3}, -1, 1, g));
  CHECK(out.shape() == Shape{0, 3});
  CHECK(bn.running_mean().to_vector<float>() == mean);
  CHECK(bn.running_var().to_vector<float>() == var);
}

TEST_CASE("Autograd.EmptyBatch.AttentionAndTransformer") {
  using namespace strata::nn;
  strata::manual_seed(5);
  MultiheadAttention causal(8, 2, true);
  expect_module("causal self-attention", causal, Shape{4, 8});
  MultiheadAttention full(8, 2, false);
  expect_module("self-attention", full, Shape{4, 8});
  strata::models::CharTransformer model({.vocab = 11, .context = 6, .width = 8, .heads = 2, .layers = 2});
  expect_empty_batch_zero(
      "the character Transformer",
      [&](std::int64_t rows) {
        std::vector<std::int64_t> tokens(static_cast<std::size_t>(rows * 6));
        for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int64_t>((i * 7 + 3) % 11);
        std::vector<std::int64_t> next(tokens.size());
        for (std::size_t i = 0; i < next.size(); ++i) next[i] = static_cast<std::int64_t>((i * 5 + 1) % 11);
        const Tensor logits = model(strata::from_vector<std::int64_t>({rows, 6}, tokens));
        CHECK(logits.shape() == Shape{rows, 6, 11});
        return cross_entropy(reshape(logits, {rows * 6, 11}), strata::from_vector<std::int64_t>({rows * 6}, next),
                             Reduction::sum_over_global_batch, 18);
      },
      model.parameters());
}

TEST_CASE("Autograd.EmptyBatch.Embeddings") {
  using namespace strata::nn;
  strata::manual_seed(6);
  for (const auto form : {strata::TableGradient::dense, strata::TableGradient::row_sparse}) {
    Embedding table(10, 4, form);
    Linear head(4, 2);
    std::vector<Tensor> params{table.weight()};
    for (const Tensor& p : head.parameters()) params.push_back(p);
    expect_empty_batch_zero(
        form == strata::TableGradient::dense ? "dense embedding" : "row-sparse embedding",
        [&](std::int64_t rows) {
          std::vector<std::int64_t> idx(static_cast<std::size_t>(rows * 3));
          for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>((i * 3 + 1) % 10);
          const Tensor e = table(strata::from_vector<std::int64_t>({rows, 3}, idx));  // [rows, 3, 4]
          return squares_and_sum(head(strata::sum(e, {1})));
        },
        params);
    if (form == strata::TableGradient::row_sparse) CHECK(table.weight().row_grad().size() == 0);
  }
}

TEST_CASE("Autograd.EmptyBatch.Losses") {
  using namespace strata::nn;
  strata::manual_seed(7);
  Linear m(5, 4);
  const auto data = [](std::int64_t rows) {
    strata::Generator g(static_cast<std::uint64_t>(rows) + 9);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 4);
    return std::pair{strata::uniform({rows, 5}, -1, 1, g), strata::from_vector<std::int64_t>({rows}, labels)};
  };
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>> losses{
      {"cross_entropy", [](const Tensor& z, const Tensor& y) { return cross_entropy(z, y, Reduction::sum_over_global_batch, 7); }},
      {"smoothed cross_entropy",
       [](const Tensor& z, const Tensor& y) { return strata::compute_average_loss(cross_entropy(z, y, Reduction::none, 0, 0.1), 7); }},
      {"nll_loss", [](const Tensor& z, const Tensor& y) {
         return nll_loss(strata::log_softmax(z), y, Reduction::sum_over_global_batch, 7);
       }},
      {"mse_loss", [](const Tensor& z, const Tensor&) { return mse_loss(z, strata::zeros(z.shape()), Reduction::sum_over_global_batch, 7); }},
      {"l1_loss", [](const Tensor& z, const Tensor&) { return l1_loss(z, strata::full(z.shape(), 0.1), Reduction::sum_over_global_batch, 7); }},
      {"huber_loss",
       [](const Tensor& z, const Tensor&) { return huber_loss(z, strata::full(z.shape(), 2.0), 1.0, Reduction::sum_over_global_batch, 7); }},
      {"bce_with_logits",
       [](const Tensor& z, const Tensor&) { return bce_with_logits(z, strata::full(z.shape(), 1.0), Reduction::sum_over_global_batch, 7); }},
      {"softmax", [](const Tensor& z, const Tensor&) { return squares_and_sum(strata::softmax(z)); }},
  };
  for (const auto& named : losses) {
    const auto& loss = named.second;  // (a lambda below uses it: clang 14 captures no structured binding)
    expect_empty_batch_zero(
        named.first.c_str(),
        [&](std::int64_t rows) {
          const auto [x, y] = data(rows);
          const Tensor l = loss(m(x), y);
          if (rows == 0) CHECK(l.item() == 0.0);  // the sum of no examples' losses
          return l;
        },
        m.parameters());
  }
}

TEST_CASE("Autograd.EmptyBatch.Dropout") {
  using namespace strata::nn;
  strata::manual_seed(8);
  Sequential m(Linear(6, 8), Dropout(0.3), Linear(8, 2));
  expect_module("dropout", m, Shape{6});
}

TEST_CASE("Autograd.EmptyBatch.ReferenceModels") {
  strata::manual_seed(9);
  auto cnn = strata::models::fashion_mnist_cnn();
  expect_module("the reference CNN", cnn, Shape{1, 28, 28});
  auto resnet = strata::models::fashion_mnist_resnet();
  expect_module("the reference ResNet", resnet, Shape{1, 28, 28});
}

// The reference ResNet and character Transformer: their size and names, the Transformer's
// causality (no position sees a later token), and that each learns a small task.
#include "doctest.hpp"

#include <cmath>
#include <vector>

#include <strata/models/char_transformer.hpp>
#include <strata/models/fashion_mnist.hpp>
#include <strata/strata.hpp>

using strata::Tensor;

namespace {

std::int64_t count(const std::vector<Tensor>& ps) {
  std::int64_t n = 0;
  for (const Tensor& p : ps) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("Models.ResNet: 0.3 M parameters, ten logits per image, batch norm buffers") {
  strata::manual_seed(0);
  auto net = strata::models::fashion_mnist_resnet();
  CHECK(count(net.parameters()) == 309162);
  CHECK(net.buffers().size() == 3 * 10);  // the stem's norm and three blocks of three norms each
  strata::Generator g(1);
  CHECK(net(strata::uniform({3, 1, 28, 28}, 0, 1, g)).shape() == strata::Shape{3, 10});
}

TEST_CASE("Models.CharTransformer: a later token never changes an earlier position's logits") {
  strata::manual_seed(2);
  strata::models::CharTransformer m({.vocab = 11, .context = 8, .width = 16, .heads = 4, .layers = 2});
  CHECK(m.named_parameters().front().first == "wte.weight");
  CHECK(m.named_parameters().back().first == "lm_head.weight");
  std::vector<std::int64_t> a{1, 2, 3, 4, 5, 6, 7, 8}, b = a;
  b[5] = 0;  // differs from position 5 on
  const auto la = m(strata::from_vector<std::int64_t>({1, 8}, a)).to_vector<float>();
  const auto lb = m(strata::from_vector<std::int64_t>({1, 8}, b)).to_vector<float>();
  for (std::size_t i = 0; i < 5 * 11; ++i) CHECK(la[i] == lb[i]);
  bool later_differ = false;
  for (std::size_t i = 5 * 11; i < la.size(); ++i) later_differ |= la[i] != lb[i];
  CHECK(later_differ);
  CHECK_THROWS_WITH_AS(m(strata::zeros({1, 9}, strata::DType::i64)), doctest::Contains("T <= 8"), strata::invalid_argument);
}

TEST_CASE("Models.CharTransformer: learns to continue a periodic text") {
  strata::manual_seed(3);
  strata::models::CharTransformer m({.vocab = 5, .context = 12, .width = 32, .heads = 2, .layers = 2});
  strata::optim::Adam opt(m.parameters(), 3e-3);
  std::vector<std::int64_t> x, y;  // the sequence 0 1 2 3 4 0 1 2 ... from 4 offsets
  for (std::int64_t r = 0; r < 4; ++r)
    for (std::int64_t t = 0; t < 12; ++t) {
      x.push_back((r + t) % 5);
      y.push_back((r + t + 1) % 5);
    }
  const Tensor xs = strata::from_vector<std::int64_t>({4, 12}, x), ys = strata::from_vector<std::int64_t>({48}, y);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = strata::nn::cross_entropy(strata::reshape(m(xs), {48, 5}), ys);
    (step == 0 ? first : last) = loss.item();
    opt.apply_gradients(strata::grad(loss, m.parameters()));
  }
  CHECK(first > 1.2);   // about log 5 at the start
  CHECK(last < 0.05);   // then the next character is certain
}

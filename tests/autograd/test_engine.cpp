#include "doctest.hpp"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/strata.hpp>

using strata::Tensor;

TEST_CASE("Autograd.Engine.SmallOracle") {
  // f(a, b) = sum((a*b + a) * relu(b)); df/da = (b + 1) * relu(b), df/db = a * relu(b) + (a*b + a) * [b > 0]
  Tensor a = strata::from_vector<double>({2}, {2.0, -3.0}, strata::DType::f64).requires_grad_();
  Tensor b = strata::from_vector<double>({2}, {0.5, -1.0}, strata::DType::f64).requires_grad_();
  Tensor f = strata::sum((a * b + a) * strata::relu(b));
  CHECK(f.item() == doctest::Approx((2 * 0.5 + 2) * 0.5));
  strata::backward(f);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1.5 * 0.5, 0.0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2 * 0.5 + (2 * 0.5 + 2), 0.0});
}

TEST_CASE("Autograd.Engine.OverwriteAndAccumulate") {
  Tensor w = strata::from_vector<double>({1}, {3.0}, strata::DType::f64).requires_grad_();
  strata::backward(strata::sum(w * w));
  CHECK(w.grad().item() == 6.0);
  strata::backward(strata::sum(w * w));  // fresh gradients each pass
  CHECK(w.grad().item() == 6.0);
  strata::backward(strata::sum(w * 5.0), {}, strata::GradAccumulation::accumulate);
  CHECK(w.grad().item() == 11.0);
}

TEST_CASE("Autograd.Engine.GradGivesZerosForUnusedParameters") {
  Tensor used = strata::ones({2}, strata::DType::f64).requires_grad_();
  Tensor unused = strata::ones({3}, strata::DType::f64).requires_grad_();
  const std::vector<Tensor> params{used, unused};
  auto g = strata::grad(strata::sum(used * 2.0), params);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2, 2});
  CHECK(g[1].to_vector<double>() == std::vector<double>{0, 0, 0});
}

TEST_CASE("Autograd.Engine.NoGradGuardAndErrors") {
  Tensor w = strata::ones({2}).requires_grad_();
  Tensor y;
  {
    strata::NoGradGuard ng;
    y = strata::sum(w * 2.0);
  }
  CHECK_FALSE(y.requires_grad());
  CHECK_THROWS_AS(strata::backward(y), strata::invalid_argument);
  Tensor z = strata::sum(w * 2.0);
  strata::backward(z);
  CHECK_THROWS_WITH_AS(strata::backward(z), doctest::Contains("already consumed"), strata::invalid_argument);
  CHECK_THROWS_AS(strata::zeros({2}, strata::DType::i64).requires_grad_(), strata::invalid_argument);
}

TEST_CASE("Autograd.Engine.HooksFireOnceWhenFinalInReverseLayerOrder") {
  strata::manual_seed(1);
  strata::nn::Sequential net(strata::nn::Linear(4, 8), strata::nn::ReLU(), strata::nn::Linear(8, 3));
  const auto named = net.named_parameters();
  std::vector<std::string> order;
  std::vector<std::vector<float>> at_hook(named.size());
  for (std::size_t i = 0; i < named.size(); ++i) {
    Tensor p = named[i].second;
    p.register_hook([&, i, name = named[i].first](const Tensor& g) {
      order.push_back(name);
      at_hook[i] = g.to_vector<float>();
    });
  }
  strata::Generator gen(2);
  Tensor x = strata::uniform({5, 4}, -1, 1, gen);
  Tensor y = strata::from_vector<std::int64_t>({5}, {0, 1, 2, 0, 1});
  auto grads = strata::grad(strata::nn::cross_entropy(net(x), y), net.parameters());
  CHECK(order == std::vector<std::string>{"2.weight", "2.bias", "0.weight", "0.bias"});
  for (std::size_t i = 0; i < named.size(); ++i) CHECK(at_hook[i] == grads[i].to_vector<float>());  // final when fired
}

TEST_CASE("Autograd.Engine.EachThreadHasItsOwnTape") {
  auto run = [](std::uint64_t seed, std::vector<double>* out) {
    strata::Generator g(seed);
    Tensor w = strata::uniform({16, 8}, -1, 1, g, strata::DType::f64).requires_grad_();
    Tensor x = strata::uniform({4, 8}, -1, 1, g, strata::DType::f64);
    for (int step = 0; step < 200; ++step) strata::backward(strata::sum(strata::tanh(strata::linear(x, w))));
    *out = w.grad().to_vector<double>();
  };
  std::vector<double> serial_a, serial_b, par_a, par_b;
  run(1, &serial_a);
  run(2, &serial_b);
  std::thread ta(run, 1, &par_a), tb(run, 2, &par_b);
  ta.join();
  tb.join();
  CHECK(par_a == serial_a);
  CHECK(par_b == serial_b);
}

namespace {
struct Counting final : strata::autograd::BackwardCallback {
  Counting(std::vector<std::string>& log, std::string name) : log_(log), name_(std::move(name)) {}
  void on_backward() override { log_.push_back(name_); }
  std::vector<std::string>& log_;
  std::string name_;
};
}  // namespace

TEST_CASE("Autograd.Engine.CallInBackwardRunsInReverseOrderAndPassesTheGradient") {
  strata::Generator g(11);
  Tensor w = strata::uniform({3, 3}, -1, 1, g).requires_grad_(true);
  const Tensor x = strata::uniform({2, 3}, -1, 1, g);
  std::vector<std::string> log;
  Counting a(log, "a"), b(log, "b"), c(log, "c");
  const std::vector<Tensor> params{w};
  auto loss_of = [&](bool callbacks) {
    Tensor h = strata::matmul(x, w);
    if (callbacks) h = strata::call_in_backward(h, a);
    h = strata::tanh(strata::matmul(h, w));
    if (callbacks) h = strata::call_in_backward(h, b);
    Tensor unused = strata::matmul(x, w);  // no gradient reaches it: its callback still runs
    if (callbacks) unused = strata::call_in_backward(unused, c);
    return strata::sum(strata::mul(h, h));
  };
  const auto want = strata::grad(loss_of(false), params)[0].to_vector<double>();
  const auto got = strata::grad(loss_of(true), params)[0].to_vector<double>();
  CHECK(log == std::vector<std::string>{"c", "b", "a"});
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  {
    strata::NoGradGuard off;  // nothing recorded: the tensor itself, no callback
    log.clear();
    const Tensor h = strata::matmul(x, w);
    CHECK(strata::call_in_backward(h, a).impl() == h.impl());
  }
}

TEST_CASE("Autograd.Engine.GradientWithoutMemoryTakesItsBucketZeroed") {
  // Two parameters' gradients as views of one bucket (with padding) whose memory was given
  // back, as ShardedStrategy's are between steps: the first gradient written takes the
  // bucket's memory again, in place, and what no gradient wrote reads zero, not old values.
  Tensor a = strata::full({3}, 1.0, strata::DType::f64).requires_grad_();
  Tensor b = strata::full({2}, 1.0, strata::DType::f64).requires_grad_();
  Tensor unused = strata::full({2}, 1.0, strata::DType::f64).requires_grad_();
  Tensor bucket = strata::full({10}, 7.0, strata::DType::f64);  // old values: 7
  a.impl()->ag.grad = strata::detail::make_view(bucket, strata::Shape{3}, strata::Shape{1}, 1);
  b.impl()->ag.grad = strata::detail::make_view(bucket, strata::Shape{2}, strata::Shape{1}, 5);
  unused.impl()->ag.grad = strata::detail::make_view(bucket, strata::Shape{2}, strata::Shape{1}, 7);
  bucket.impl()->storage()->give_memory_back();
  // A bucket no gradient reaches takes its memory for the zeros grad() writes.
  Tensor c = strata::full({2}, 1.0, strata::DType::f64).requires_grad_();
  Tensor other = strata::full({4}, 7.0, strata::DType::f64);
  c.impl()->ag.grad = strata::detail::make_view(other, strata::Shape{2}, strata::Shape{1}, 1);
  other.impl()->storage()->give_memory_back();
  const std::vector<Tensor> params{a, b, unused, c};
  auto g = strata::grad(strata::sum(a * 2.0) + strata::sum(b) * strata::sum(a), params);
  REQUIRE(bucket.impl()->storage()->holds_memory());
  CHECK(a.grad().raw_data() == static_cast<double*>(bucket.raw_data()) + 1);  // written in place
  CHECK(b.grad().raw_data() == static_cast<double*>(bucket.raw_data()) + 5);
  // d/da = 2 + sum(b) = 4; d/db = sum(a) = 3; unused: 0 (zero_gradient in its slot)
  CHECK(bucket.to_vector<double>() == std::vector<double>{0, 4, 4, 4, 0, 3, 3, 0, 0, 0});
  CHECK(g[2].to_vector<double>() == std::vector<double>{0, 0});
  REQUIRE(other.impl()->storage()->holds_memory());
  CHECK(c.grad().raw_data() == static_cast<double*>(other.raw_data()) + 1);
  CHECK(other.to_vector<double>() == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("Autograd.Engine.ZeroDimensionalOperandsGetTheirGradientNotAStaleBuffer") {
  // The gradient of a 0-d operand of a binary op is overwritten, not added to the buffer
  // autograd took for it (a recycled one holds an earlier tensor's values).
  auto leaf = [](double v) { return strata::full({}, v, strata::DType::f64).requires_grad_(); };
  for (int round = 0; round < 3; ++round) {
    Tensor b = leaf(2), a = leaf(3), c = leaf(5);
    strata::backward((b * a) * 1.0);
    CHECK(b.grad().item() == 3.0);
    CHECK(a.grad().item() == 2.0);
    strata::backward(c + b * a);
    CHECK(b.grad().item() == 3.0);
    CHECK(a.grad().item() == 2.0);
    CHECK(c.grad().item() == 1.0);
    strata::backward((b * a) * 1.0 + (c - a) / b);  // d/db = a - (c - a) / b^2, d/da = b - 1 / b, d/dc = 1 / b
    CHECK(b.grad().item() == doctest::Approx(3.0 - 2.0 / 4.0));
    CHECK(a.grad().item() == doctest::Approx(2.0 - 0.5));
    CHECK(c.grad().item() == doctest::Approx(0.5));
    Tensor x = strata::full({3}, 1.0, strata::DType::f64).requires_grad_();
    Tensor y = strata::full({2}, 1.0, strata::DType::f64).requires_grad_();
    Tensor sy = strata::sum(y), sx = strata::sum(x);
    strata::backward(strata::sum(x * 2.0) + sy * sx);  // d/dx = 2 + sum(y) = 4, d/dy = sum(x) = 3
    CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 4, 4});
    CHECK(y.grad().to_vector<double>() == std::vector<double>{3, 3});
  }
}

#include "doctest.hpp"

#include <cmath>

#include <strata/strata.hpp>

using strata::Tensor;
namespace nn = strata::nn;

TEST_CASE("NN.Sequential.NamesParametersLikePyTorch") {
  nn::Sequential net(nn::Conv2d(1, 4, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(36, 10));
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "4.weight", "4.bias"});
  CHECK(net.parameters().size() == 4);
  CHECK(&net.parameters() == &net.parameters());  // cached, not rebuilt per call
  CHECK(net(strata::zeros({2, 1, 8, 8})).shape() == strata::Shape{2, 10});
}

TEST_CASE("NN.Linear.InitialisedWithinPyTorchBounds") {
  strata::manual_seed(7);
  nn::Linear a(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);
  double lo = 1, hi = -1;
  for (double v : a.weight().to_vector<double>()) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi - lo > 1.8 * bound);  // fills the range
  strata::manual_seed(7);
  nn::Linear b(100, 50);
  CHECK(a.weight().to_vector<float>() == b.weight().to_vector<float>());  // seeded
}

TEST_CASE("NN.Sequential.FusedLinearReluEqualsUnfused") {
  strata::manual_seed(3);
  nn::Sequential fused(nn::Linear(6, 5), nn::ReLU(), nn::Linear(5, 2));
  strata::Generator g(4);
  Tensor x = strata::uniform({7, 6}, -1, 1, g);
  const auto& p = fused.parameters();
  // The same computation written op by op, with no fusion.
  auto unfused = [&] { return strata::linear(strata::relu(strata::linear(x, p[0], p[1])), p[2], p[3]); };
  Tensor y1 = fused(x);
  Tensor y2 = unfused();
  CHECK(y1.to_vector<float>() == y2.to_vector<float>());
  strata::Tensor labels = strata::from_vector<std::int64_t>({7}, {0, 1, 0, 1, 1, 0, 0});
  auto g1 = strata::grad(nn::cross_entropy(fused(x), labels), p);
  std::vector<std::vector<float>> first;
  for (std::size_t i = 0; i < p.size(); ++i) first.push_back(g1[i].to_vector<float>());
  auto g2 = strata::grad(nn::cross_entropy(unfused(), labels), p);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(g2[i].to_vector<float>() == first[i]);
}

TEST_CASE("NN.Dropout.TrainingAndEvaluation") {
  nn::Dropout d(0.25);
  Tensor x = strata::ones({10000});
  const auto y = d(x).to_vector<double>();
  int zeros = 0;
  for (double v : y) {
    CHECK((v == 0.0 || v == doctest::Approx(1 / 0.75)));
    zeros += v == 0.0;
  }
  CHECK(zeros > 2200);
  CHECK(zeros < 2800);
  d.eval();
  CHECK(d(x).to_vector<double>() == x.to_vector<double>());
  CHECK_THROWS_AS(nn::Dropout(1.0), strata::invalid_argument);
}

TEST_CASE("NN.Loss.ReductionsScaleTheSum") {
  Tensor logits = strata::from_vector<double>({2, 3}, {1, 2, 3, 0, 0, 5}, strata::DType::f64);
  Tensor y = strata::from_vector<std::int64_t>({2}, {2, 1});
  const double sum = nn::cross_entropy(logits, y, nn::Reduction::sum).item();
  CHECK(nn::cross_entropy(logits, y).item() == doctest::Approx(sum / 2));
  CHECK(nn::cross_entropy(logits, y, nn::Reduction::sum_over_global_batch, 8).item() == doctest::Approx(sum / 8));
  CHECK_THROWS_AS(nn::cross_entropy(logits, y, nn::Reduction::sum_over_global_batch), strata::invalid_argument);
  const double row0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3;
  const double row1 = std::log(2 + std::exp(5)) - 0;
  CHECK(sum == doctest::Approx(row0 + row1));
}

TEST_CASE("NN.Loss.ZeroClassesIsAnError") {
  // Padding labels pass the label check, so the class count is checked on its own: a device
  // kernel would otherwise read the first logit of an empty row.
  Tensor logits = strata::Tensor::empty({2, 0}, strata::DType::f32);
  Tensor pad = strata::from_vector<std::int64_t>({2}, {-1, -1});
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, pad), doctest::Contains("zero classes"), strata::invalid_argument);
}

TEST_CASE("NN.Modules: Tanh and Sigmoid modules apply their functions") {
  strata::Generator g(3);
  const strata::Tensor x = strata::uniform({4, 3}, -3, 3, g, strata::DType::f64);
  strata::nn::Sequential net{strata::nn::Tanh(), strata::nn::Sigmoid()};
  const auto got = net(x).to_vector<double>(), in = x.to_vector<double>();
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(got[i] == doctest::Approx(1 / (1 + std::exp(-std::tanh(in[i])))).epsilon(1e-15));
}

namespace {
// Records the calls it sees and scales each output by 2 (after() replaces it).
struct RecordingHook final : nn::Module::CallHook {
  std::vector<std::string> log;
  void before(nn::Module&) override { log.push_back("before"); }
  Tensor after(nn::Module&, Tensor out) override {
    log.push_back("after");
    return strata::mul(out, 2.0);
  }
};
}  // namespace

TEST_CASE("NN.Module.CallHookRunsAroundOperatorCallsAndNotForward") {
  strata::manual_seed(3);
  nn::Sequential net(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  strata::Generator g(5);
  const Tensor x = strata::uniform({5, 4}, -1, 1, g);
  const auto plain = net(x).to_vector<float>();
  auto modules = net.named_modules();
  REQUIRE(modules.size() == 3);
  CHECK(modules[0].first == "0");
  CHECK(modules[2].first == "2");
  RecordingHook first, last;
  modules[0].second->set_call_hook(&first);  // fused with the ReLU: called through call_fused
  modules[2].second->set_call_hook(&last);
  const auto hooked = net(x).to_vector<float>();
  CHECK(first.log == std::vector<std::string>{"before", "after"});
  CHECK(last.log == std::vector<std::string>{"before", "after"});
  // relu(2 h) = 2 relu(h): both doublings reach the output, 4 times the bias-free part.
  nn::Linear& l2 = static_cast<nn::Linear&>(*modules[2].second);
  const auto b2 = l2.bias().to_vector<float>();
  for (std::size_t i = 0; i < plain.size(); ++i)
    CHECK(hooked[i] == doctest::Approx(2.0 * (2.0 * (plain[i] - b2[i % 2]) + b2[i % 2])).epsilon(1e-5));
  (void)modules[2].second->forward(strata::relu(modules[0].second->forward(x)));  // forward(): no hook
  CHECK(last.log.size() == 2);
  modules[0].second->set_call_hook(nullptr);
  modules[2].second->set_call_hook(nullptr);
  CHECK(net(x).to_vector<float>() == plain);
}

namespace {
// Records where the module it is set on went.
struct FollowingHook final : nn::Module::CallHook {
  std::vector<nn::Module*> moves;
  void before(nn::Module&) override {}
  Tensor after(nn::Module&, Tensor out) override { return out; }
  void moved(nn::Module* to) noexcept override { moves.push_back(to); }
};
}  // namespace

TEST_CASE("NN.Module.CallHookFollowsItsModuleAndHearsItsEnd") {
  // A hook that keeps its module's address (ShardedStrategy's wrap units) learns where a move
  // takes the module and when it ends, so it never reaches a module that is gone.
  FollowingHook hook;
  {
    nn::Linear a(4, 3);
    a.set_call_hook(&hook);
    nn::Linear b(std::move(a));
    CHECK(a.call_hook() == nullptr);
    CHECK(b.call_hook() == &hook);
    REQUIRE(hook.moves.size() == 1);
    CHECK(hook.moves[0] == &b);
    FollowingHook other;
    nn::Linear c(2, 2);
    c.set_call_hook(&other);
    c = std::move(b);  // c's own hook hears that its module was replaced
    CHECK(c.call_hook() == &hook);
    CHECK(other.moves == std::vector<nn::Module*>{nullptr});
    REQUIRE(hook.moves.size() == 2);
    CHECK(hook.moves[1] == &c);
  }
  REQUIRE(hook.moves.size() == 3);
  CHECK(hook.moves[2] == nullptr);  // c ended
}

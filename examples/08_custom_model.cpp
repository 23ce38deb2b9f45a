// 08 — Your own model on your own data: a module with parameters of its own and a residual
// connection, trained on points held in memory (three interleaved spirals, made here), under
// MirroredStrategy. A custom module derives from nn::Module, registers its parameters by name
// (the names checkpoints store) and defines forward(); the strategy copies it per replica.
//
//   build/examples/08_custom_model
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include <strata/strata.hpp>

using namespace strata;

// x -> h = relu(x W1 + b1) -> h + relu(h W2 + b2) -> logits.
class SpiralNet : public nn::Module {
 public:
  explicit SpiralNet(std::int64_t hidden) {
    w1_ = make("in.weight", {hidden, 2});
    b1_ = register_parameter("in.bias", zeros({hidden}));
    w2_ = make("res.weight", {hidden, hidden});
    b2_ = register_parameter("res.bias", zeros({hidden}));
    w3_ = make("out.weight", {3, hidden});
    b3_ = register_parameter("out.bias", zeros({3}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = linear(x, w1_, b1_, Activation::relu);
    h = h + linear(h, w2_, b2_, Activation::relu);  // the residual connection
    return linear(h, w3_, b3_);
  }

 private:
  Tensor make(const char* name, Shape shape) {
    Tensor w = Tensor::empty(shape);
    nn::init::kaiming_uniform_(w, default_generator());
    return register_parameter(name, w);
  }
  Tensor w1_, b1_, w2_, b2_, w3_, b3_;
};

// n points per class on three spiral arms, with a little noise.
data::TensorDataset spirals(std::int64_t n) {
  std::mt19937 rng(0);
  std::normal_distribution<float> noise(0.0f, 0.15f);
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t i = 0; i < n; ++i) {
      const float r = static_cast<float>(i) / static_cast<float>(n), a = 4.0f * r + 2.094f * static_cast<float>(c);
      x.push_back(r * std::cos(a) + noise(rng) * r);
      x.push_back(r * std::sin(a) + noise(rng) * r);
      y.push_back(c);
    }
  return {from_vector<float>({3 * n, 2}, x), from_vector<std::int64_t>({3 * n}, y)};
}

template <Strategy S>
void train(S& strategy, const data::TensorDataset& points) {
  auto model = strategy.scope([] { return SpiralNet(64); });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.01); });
  for (int epoch = 0; epoch < 20; ++epoch) {
    double correct = 0;
    for (auto& batch : strategy.distribute(data::Pipeline(points).shuffle(epoch).batch(100))) {
      auto counts = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
        Tensor logits = model(b.x);
        Tensor loss = nn::cross_entropy(logits, b.y, nn::Reduction::sum_over_global_batch, b.global_size);
        opt.apply_gradients(ctx, grad(loss, model.parameters()));
        return static_cast<double>(count_correct(logits, b.y));
      }, batch);
      correct += strategy.reduce(ReduceOp::Sum, counts);
    }
    if (strategy.is_chief() && epoch % 5 == 4)
      std::printf("epoch %2d: training accuracy %.1f %%\n", epoch + 1, 100.0 * correct / points.size());
  }
}

int main() {
  try {
    MirroredStrategy<> strategy(2);
    train(strategy, spirals(500));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "08_custom_model: %s\n", e.what());
    return 1;
  }
}

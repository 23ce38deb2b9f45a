// The README's first program: one training loop written as a template over the strategy,
// run here with OneDeviceStrategy for one epoch of Fashion-MNIST.
#include <cstdio>
#include <exception>

#include <strata/strata.hpp>

template <strata::Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace strata::nn;
    return Sequential(Flatten(), Linear(784, 512), ReLU(), Linear(512, 10));
  });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(model.parameters(), 0.05, 0.9); });
  auto data = strategy.distribute(
      strata::data::Pipeline(strata::data::fashion_mnist_train()).shuffle(0).batch(64));
  double mean_loss = 0;
  for (auto& batch : data) {
    auto losses = strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = strata::nn::cross_entropy(model(b.x), b.y,
                                            strata::nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, model.parameters()));
      return loss;
    }, batch);
    mean_loss = strategy.reduce(strata::ReduceOp::Sum, losses).item();
  }
  if (strategy.is_chief()) std::printf("last step's loss: %.4f\n", mean_loss);
}

int main() {
  try {
    strata::OneDeviceStrategy strategy;
    train(strategy);
  } catch (const std::exception& e) {  // a missing data file, a bad argument: said, not a crash
    std::fprintf(stderr, "first_program: %s\n", e.what());
    return 1;
  }
}

// 01 — One device: the training loop every later example reuses, written once as a template
// over the strategy, here run on OneDeviceStrategy. An MLP on Fashion-MNIST for 300 steps of
// 64 images, then its accuracy on the 10,000 test images.
//
//   build/examples/01_one_device
#include <cstdio>
#include <exception>

#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 256), ReLU(), Linear(256, 10));
  });
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(0).batch(64).take(300));

  for (auto& batch : batches) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      // Scaled by the global batch: summed over the replicas it is the global batch's mean.
      Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, model.parameters()));
      return loss;
    }, batch);
    const double loss = strategy.reduce(ReduceOp::Sum, losses).item();
    if (strategy.is_chief() && batch.index % 100 == 99)
      std::printf("step %3lld  loss %.4f\n", static_cast<long long>(batch.index + 1), loss);
  }

  // Evaluation: no tape, the whole test set in one forward pass.
  NoGradGuard no_grad;
  model.eval();
  const data::TensorDataset test = data::fashion_mnist_test();
  if (strategy.is_chief()) std::printf("test accuracy %.2f %%\n", 100.0 * accuracy(model(test.x), test.y));
}

int main() {
  try {
    OneDeviceStrategy strategy;
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "01_one_device: %s\n", e.what());
    return 1;
  }
}

// 02 — MirroredStrategy: the loop of 01 on several replicas in one process, one thread each.
// Each step's global batch of 128 images is split between the replicas; the gradients are
// summed across them (overlapped with backward) and every replica applies the same update
// to its copy of the model, so the copies stay identical. The replicas also count their
// correct predictions, and the strategy sums the counts.
//
//   build/examples/02_mirrored [replicas]      (default 2)
#include <cstdio>
#include <cstdlib>
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
  const std::int64_t global_batch = 128;
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(1).batch(global_batch).take(200));

  double correct = 0, seen = 0;
  for (auto& batch : batches) {
    auto counts = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      // b holds this replica's share of the global batch: b.size rows of b.global_size.
      Tensor logits = model(b.x);
      Tensor loss = nn::cross_entropy(logits, b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, model.parameters()));
      return static_cast<double>(count_correct(logits, b.y));
    }, batch);
    correct += strategy.reduce(ReduceOp::Sum, counts);  // over every replica
    seen += static_cast<double>(batch.global_size);
  }
  if (strategy.is_chief())
    std::printf("%d replicas: %.0f steps, training accuracy %.2f %% over the run\n", strategy.num_replicas_in_sync(),
                seen / global_batch, 100.0 * correct / seen);
}

int main(int argc, char** argv) {
  try {
    MirroredStrategy<> strategy(argc > 1 ? std::atoi(argv[1]) : 2);
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "02_mirrored: %s\n", e.what());
    return 1;
  }
}

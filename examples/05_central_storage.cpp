// 05 — CentralStorageStrategy: one copy of the variables, on the host, shared by the replicas.
// The replicas (threads) compute on it; each step their gradients are summed and the update
// is applied once, to the one copy, split across the replicas. The model here is
// Replicated<Sequential>: one view per replica over the same storage.
//
//   build/examples/05_central_storage
#include <cstdio>
#include <exception>

#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 128), ReLU(), Linear(128, 10));
  });
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.1, {.momentum = 0.9, .nesterov = true}); });
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(4).batch(96).take(200));

  double first = 0, last = 0;
  for (auto& batch : batches) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, model.parameters()));
      return loss;
    }, batch);
    last = strategy.reduce(ReduceOp::Sum, losses).item();
    if (batch.index == 0) first = last;
  }
  // Every replica reads the same storage: replica 1's first weight is replica 0's.
  const bool shared = model.replica(0).parameters()[0].raw_data() == model.replica(1).parameters()[0].raw_data();
  std::printf("%d replicas over one copy (%s): loss %.4f -> %.4f\n", strategy.num_replicas_in_sync(),
              shared ? "shared storage" : "separate copies", first, last);
}

int main() {
  try {
    CentralStorageStrategy strategy(2);
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "05_central_storage: %s\n", e.what());
    return 1;
  }
}

// 16 — ShardedStrategy's stage 3 over Gloo: the parameters are sharded too (ZeRO-3, FSDP).
// Each process keeps only its block of every wrap unit's parameters, their gradients and Adam
// state between steps; a unit's parameters are gathered just before its forward and again
// before its backward, and given back after. The wrap units here are named: the MLP's three
// hidden layers (the size rule, ShardOptions::unit_bytes, picks them where none are named).
// The loop is any strategy's; the chief saves the trained weights inside gather_parameters,
// which makes them whole for its scope (under any other strategy it does nothing).
//
//   build/tools/strata-run -np 2 build/examples/16_sharded_parameters
#include <cstdio>
#include <exception>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 512), ReLU(), Linear(512, 512), ReLU(), Linear(512, 256), ReLU(),
                      Linear(256, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  opt.clip_by_global_norm(1.0);
  double loss = 0;
  for (auto& batch : strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(4).batch(100).take(60))) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();
  }
  // Between steps this process holds no memory for the units' whole parameters.
  std::printf("rank %d of %d: last loss %.4f; wrap units hold %zu bytes between steps\n", strategy.rank(),
              strategy.num_replicas_in_sync(), loss, strategy.unit_bytes_held(model.parameters()));
  {
    const GatheredParameters whole = gather_parameters(strategy, model.parameters());  // with every rank
    if (strategy.is_chief()) save_weights(model, "sharded_mlp.strata");
  }
  if (strategy.is_chief()) std::printf("saved the whole model to sharded_mlp.strata\n");
}

int main() {
  try {
    ShardOptions units;
    units.wrap_units = {"1", "3", "5"};
    ShardedStrategy<collective::Gloo, ShardStage::parameters> strategy(MultiWorkerOptions{}, units);
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "16_sharded_parameters: %s\n", e.what());
    return 1;
  }
}

// 15 — ShardedStrategy over MPI: the loop of 03, with each process keeping the optimizer state
// of its shard of the parameters only, and receiving only its shard of the summed gradients
// (ZeRO stage 2; ShardStage::optimizer_state is stage 1). The template argument is the one
// change; Adam's state per process falls with the process count. A small CNN, 60 steps of 64
// images across all processes, with clipping by the global norm (combined over the shards).
//
//   mpirun -np 2 build/examples/15_sharded
//   (as root add --allow-run-as-root; with more processes than cores, --oversubscribe)
#include <cstdio>
#include <exception>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Conv2d(1, 16, 5), ReLU(), MaxPool2d(2), Flatten(), Linear(16 * 12 * 12, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  opt.clip_by_global_norm(1.0);
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(2).batch(64).take(60));

  double loss = 0;
  for (auto& batch : batches) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();
  }
  // This process's optimizer state: the two moments of its shard, not of the whole model.
  std::int64_t params = 0, state = 0;
  for (const Tensor& p : model.parameters()) params += p.numel();
  for (const auto& [name, t] : opt.state()) state += t.numel();
  std::printf("rank %d of %d: last loss %.4f; Adam state %lld floats for %lld parameters (whole: %lld)\n",
              strategy.rank(), strategy.num_replicas_in_sync(), loss, static_cast<long long>(state),
              static_cast<long long>(params), static_cast<long long>(2 * params));
}

int main() {
  try {
    ShardedStrategy<collective::Mpi> strategy;
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "15_sharded: %s\n", e.what());
    runtime::fail_job(e.what());
    return 1;
  }
}

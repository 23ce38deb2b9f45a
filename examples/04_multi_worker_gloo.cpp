// 04 — MultiWorkerMirroredStrategy over Gloo: the same loop over TCP, no MPI needed. strata-run
// starts the processes and hands each its rank and the rendezvous (a TCP store on 127.0.0.1);
// on several hosts, set STRATA_RANK, STRATA_WORLD_SIZE and STRATA_MASTER_ADDR yourself
// (docs/launching.md). The gradients travel as 16-bit floats here (Compression::bf16), which
// halves the bytes on the wire.
//
//   build/tools/strata-run -np 2 build/examples/04_multi_worker_gloo
#include <cstdio>
#include <exception>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 256), ReLU(), Linear(256, 256), ReLU(), Linear(256, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(3).batch(128).take(150));

  for (auto& batch : batches) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, model.parameters()));
      return loss;
    }, batch);
    const double loss = strategy.reduce(ReduceOp::Sum, losses).item();
    if (strategy.is_chief() && batch.index % 50 == 49)
      std::printf("step %3lld  loss %.4f  (%d processes)\n", static_cast<long long>(batch.index + 1), loss,
                  strategy.num_replicas_in_sync());
  }
}

int main() {
  try {
    MultiWorkerOptions options;
    options.compression = Compression::bf16;
    MultiWorkerMirroredStrategy<collective::Gloo> strategy(options);
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "04_multi_worker_gloo: %s\n", e.what());
    return 1;
  }
}

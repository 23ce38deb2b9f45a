// 06 — ParameterServerStrategy: the variables live on server processes, sharded; the worker
// processes compute gradients, push them, and pull the new values. The same loop as 01: on a
// server rank the loop over distribute() serves the workers until they finish the epoch, and
// its body runs on the workers only. Sync: every step waits for all workers (the result equals
// one device on the global batch); ps::Async would let each worker go at its own pace.
//
//   mpirun -np 3 build/examples/06_parameter_server      (1 server, 2 workers)
#include <cstdio>
#include <exception>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>  // not in the umbrella header

using namespace strata;

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 256), ReLU(), Linear(256, 10));
  });
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(5).batch(64).take(150));

  double loss = 0;
  for (auto& batch : batches) {  // servers serve in here; workers run the body
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));  // push, the servers update, pull
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();
  }
  if (strategy.is_chief()) std::printf("workers %d, servers %d: last loss %.4f\n", strategy.num_workers(),
                                       strategy.num_servers(), loss);
}

int main() {
  try {
    ParameterServerStrategy<collective::Mpi, ps::Sync> strategy({.servers = 1});
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "06_parameter_server: %s\n", e.what());
    runtime::fail_job(e.what());  // the other ranks stop now, not at their deadlines
    return 1;
  }
}

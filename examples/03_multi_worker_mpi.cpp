// 03 — MultiWorkerMirroredStrategy over MPI: one replica per process, started by mpirun.
// Every process builds the same model (rank 0's initial values are broadcast to the others),
// reads its own rows of each global batch, and the gradients are all-reduced over MPI while
// backward runs. A small CNN, 60 steps of 64 images across all processes.
//
//   mpirun -np 2 build/examples/03_multi_worker_mpi
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
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(2).batch(64).take(60));

  double loss = 0;
  for (auto& batch : batches) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();  // the same on every process
  }
  // Every process holds the same parameters: compare a checksum of this rank's with the mean.
  double sum = 0;
  for (const Tensor& p : model.parameters()) sum += strata::sum(p).item();
  PerReplica<double> mine(1);
  mine[0] = sum;
  const double mean = strategy.reduce(ReduceOp::Mean, mine);
  std::printf("rank %d of %d: last loss %.4f, parameter sum %.6f (mean over ranks %.6f)\n", strategy.rank(),
              strategy.num_replicas_in_sync(), loss, sum, mean);
}

int main() {
  try {
    MultiWorkerMirroredStrategy<collective::Mpi> strategy;
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "03_multi_worker_mpi: %s\n", e.what());
    runtime::fail_job(e.what());  // the other ranks stop now, not at their deadlines
    return 1;
  }
}

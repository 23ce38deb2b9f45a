// 15 — ShardedStrategy over MPI: the loop of 03, with each process keeping the optimizer state
// of its shard of the parameters only, and receiving only its shard of the summed gradients
// (ZeRO stage 2; ShardStage::optimizer_state is stage 1). The template argument is the one
// change; Adam's state per process falls with the process count. A small CNN, 60 steps of 64
// images across all processes, with clipping by the global norm (combined over the shards).
// It resumes from the newest checkpoint in [dir] and saves one at the end: each process writes
// its shard of the state beside the chief's manifest, and a run on another number of processes
// reshards the state as it restores it (the global batch, 64, is the same on any count).
//
//   mpirun -np 2 build/examples/15_sharded [dir]     (default ckpt_sharded)
//   mpirun -np 3 build/examples/15_sharded [dir]     resumes the same run on 3 processes
//   (as root add --allow-run-as-root; with more processes than cores, --oversubscribe)
#include <cstdio>
#include <exception>
#include <string>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy, const std::string& dir) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Conv2d(1, 16, 5), ReLU(), MaxPool2d(2), Flatten(), Linear(16 * 12 * 12, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  opt.clip_by_global_norm(1.0);
  auto pipeline = data::Pipeline(data::fashion_mnist_train()).shuffle(2).batch(64).take(60);

  TrainingCheckpoints checkpoints(strategy, model, opt, dir);
  checkpoint::TrainingPosition at;  // the global batch does not depend on the process count: any count resumes
  if (auto resumed = checkpoints.restore(RestoreOptions{.any_replica_count = true})) {
    at = *resumed;
    if (strategy.is_chief())
      std::printf("resumed at step %lld on %d processes\n", static_cast<long long>(at.step),
                  strategy.num_replicas_in_sync());
  }
  pipeline.set_position(at.epoch, at.batch);

  double loss = 0;
  for (auto& batch : strategy.distribute(pipeline)) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();
    at = at.after(batch, pipeline.num_batches());
  }
  checkpoints.save(at);  // every process writes its shard; the chief, the manifest
  // This process's optimizer state: the two moments of its shard, not of the whole model.
  std::int64_t params = 0, state = 0;
  for (const Tensor& p : model.parameters()) params += p.numel();
  for (const auto& [name, t] : opt.state()) state += t.numel();
  std::printf("rank %d of %d: last loss %.4f; Adam state %lld floats for %lld parameters (whole: %lld)\n",
              strategy.rank(), strategy.num_replicas_in_sync(), loss, static_cast<long long>(state),
              static_cast<long long>(params), static_cast<long long>(2 * params));
}

int main(int argc, char** argv) {
  try {
    ShardedStrategy<collective::Mpi> strategy;
    train(strategy, argc > 1 ? argv[1] : "ckpt_sharded");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "15_sharded: %s\n", e.what());
    runtime::fail_job(e.what());
    return 1;
  }
}

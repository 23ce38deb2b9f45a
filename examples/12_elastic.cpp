// 12 — Elastic training: the job goes on when a worker is lost, and takes in a new one.
// strata-run --elastic MIN:MAX serves the job's membership; elastic::Trainer runs the loop:
// each change of membership builds the collective anew, hands the state of a survivor to
// every worker (no checkpoint on disk), and goes on from the last completed step, every
// example of the epoch still seen once. The per-worker batch is fixed, so the global batch
// follows the worker count; here the learning rate follows it too (the default keeps it).
//
// With a directory (`12_elastic ck`), the same loop under ShardedStrategy: no worker holds
// the whole state, so it moves through sharded checkpoints in that directory, saved every 50
// steps and at each change (a lost worker costs the steps since the last one).
//
//   build/tools/strata-run -np 3 --elastic 2:4 --port 29600 build/examples/12_elastic [ck]
//   # kill one of them: the others go on. Add one (same STRATA_JOB_TOKEN as the job's):
//   STRATA_ELASTIC=2:4 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=29600 build/examples/12_elastic [ck]
#include <cstdio>
#include <exception>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/elastic.hpp>

using namespace strata;

// The loop, the same under either strategy: only the template argument changes.
template <class Strategy>
void train(const elastic::TrainOptions& options) {
  elastic::Trainer<collective::Gloo, Strategy> trainer(data::fashion_mnist_train(), options);

  trainer.on_generation([](const elastic::Progress& p) {
    if (p.rank == 0)
      std::printf("generation %llu: %d workers from step %lld (after %s)\n", static_cast<unsigned long long>(p.generation),
                  p.workers, static_cast<long long>(p.step), p.resumed_after.c_str());
  });
  auto model = trainer.run(
      [] {
        using namespace nn;
        return Sequential(Flatten(), Linear(784, 128), ReLU(), Linear(128, 10));
      },
      [](auto& model) { return optim::Sgd(model.parameters(), 0.05, 0.9); },
      [&](auto& strategy, auto& model, auto& opt, const data::Batch& batch) {
        auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
          Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
          opt.apply_gradients(ctx, grad(loss, model.parameters()));
          return loss;
        }, batch);
        const double loss = strategy.reduce(ReduceOp::Sum, losses).item();
        if (strategy.is_chief() && trainer.progress().step % 100 == 99)
          std::printf("step %lld  loss %.4f  (%d workers)\n", static_cast<long long>(trainer.progress().step + 1), loss,
                      strategy.num_replicas_in_sync());
      });

  // Every worker ends with the same parameters; the first evaluates them.
  if (trainer.progress().rank == 0) {
    OneDeviceStrategy one;
    metrics::Accuracy accuracy;
    evaluate(one, model, data::Pipeline(data::fashion_mnist_test()).batch(1000), accuracy);
    std::printf("test accuracy %.2f %%\n", 100 * accuracy.result(one));
  }
}

int main(int argc, char** argv) {
  try {
    elastic::TrainOptions options;
    options.per_replica_batch = 64;
    options.epochs = 1;
    options.on_resize = elastic::scale_lr_linearly;
    if (argc > 1) {
      options.checkpoint_dir = argv[1];
      train<ShardedStrategy<collective::Gloo>>(options);
    } else {
      train<MultiWorkerMirroredStrategy<collective::Gloo>>(options);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "12_elastic: %s\n", e.what());
    return 1;
  }
}

// 07 — Checkpoints: save the run's state every 50 steps, and resume where it stopped. Run it,
// interrupt it (or let it finish), run it again: it continues from the newest complete
// checkpoint in the directory — the same parameters, optimizer state, data order and
// generator — so the resumed run ends where an uninterrupted one would. Works the same under
// every synchronous strategy; the chief writes, and every replica restores.
//
//   build/examples/07_checkpoint_resume [dir] [steps]     (default ckpt, 200)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy, const std::string& dir, std::int64_t steps) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 128), ReLU(), Linear(128, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  auto pipeline = data::Pipeline(data::fashion_mnist_train()).shuffle(6).batch(64).take(steps);

  TrainingCheckpoints checkpoints(strategy, model, opt, dir);
  checkpoint::TrainingPosition at;  // {step, epoch, batch}: `batch` is the next batch of `epoch`
  if (auto resumed = checkpoints.restore()) {
    at = *resumed;
    if (strategy.is_chief()) std::printf("resuming at step %lld\n", static_cast<long long>(at.step));
  }
  pipeline.set_position(at.epoch, at.batch);  // skips the batches already trained

  double loss = 0;
  auto data = strategy.distribute(pipeline);
  for (auto& batch : data) {
    auto losses = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(ReduceOp::Sum, losses).item();
    at = at.after(batch, data.num_batches());  // a step more; the batch after this one
    if (at.step % 50 == 0) checkpoints.save(at);
  }
  checkpoints.save(at);  // the epoch is done: at is {steps, 1, 0}
  if (strategy.is_chief()) std::printf("step %lld: loss %.4f; checkpoints in %s\n", static_cast<long long>(at.step),
                                       loss, dir.c_str());
}

int main(int argc, char** argv) {
  try {
    MirroredStrategy<> strategy(2);
    train(strategy, argc > 1 ? argv[1] : "ckpt", argc > 2 ? std::atoll(argv[2]) : 200);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "07_checkpoint_resume: %s\n", e.what());
    return 1;
  }
}

// Fashion-MNIST trainer: the reference MLP or CNN, trained by one loop written as a template
// over the strategy. The strategy is picked at run time (../common/strategy_flags.hpp maps
// the flags onto the template's instantiations); options.hpp holds the flags, report.hpp what
// is printed and written besides training, step.hpp one step.
//
//   fashion_mnist --model mlp --epochs 3 --seed 0
//   fashion_mnist --model cnn --epochs 1 --batch 64 --lr 0.05 --data /path/to/fashion-mnist
//   fashion_mnist --strategy mirrored --replicas 2                 (two replica threads)
//   mpirun -np 2 fashion_mnist --strategy multi_worker_mirrored --collective mpi
//   strata-run -np 2 fashion_mnist --strategy multi_worker_mirrored --collective gloo
//   mpirun -np 3 fashion_mnist --strategy parameter_server --servers 1 --mode sync|async
//   strata-run -np 2 --max-restarts 3 fashion_mnist --strategy multi_worker_mirrored --collective gloo
//       --checkpoint-dir ckpt --checkpoint-every 200     (a failed rank restarts the job from its checkpoint)
//   fashion_mnist_cuda --device cuda:0                              (with the kernels of cuda_kernels.cu)
//   mpirun -np 2 fashion_mnist_cuda --strategy multi_worker_mirrored --collective nccl   (one GPU per rank)
//   fashion_mnist_cuda --strategy mirrored --collective nccl --replicas 2     (one replica thread per GPU)
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>

#include "options.hpp"
#include "report.hpp"
#include "step.hpp"

namespace fmnist {

/// Test-set accuracy, evaluated without recording gradients, on the variables' device.
inline double evaluate(strata::nn::Module& model, const strata::data::TensorDataset& test) {
  strata::NoGradGuard no_grad;
  model.eval();
  std::int64_t correct = 0;
  const strata::Device device = model.parameters().front().device();
  for (const auto& b : strata::data::Pipeline(test).batch(1000)) correct += strata::count_correct(model(b.x.to(device)), b.y);
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

/// What a strategy without checkpoints gets (an asynchronous parameter server: the flags
/// refuse --checkpoint-dir there, so it is never made).
struct NoCheckpoints {
  std::optional<strata::checkpoint::TrainingPosition> restore() { return std::nullopt; }
  void save(const strata::checkpoint::TrainingPosition&) {}
};

/// The training loop, the same for every strategy.
template <strata::Strategy S>
void train(S& strategy, const Options& o) {
  strata::manual_seed(o.seed);
  auto model = strategy.scope([&] { return strata::models::fashion_mnist(o.model); });
  auto opt = strategy.scope(
      [&] { return strata::optim::Sgd(model.parameters(), o.lr, {.momentum = o.momentum_or_default()}); });
  auto pipeline = strata::data::Pipeline(strata::data::fashion_mnist_train(o.data_dir))
                      .shuffle(o.seed)
                      .batch(o.batch * strategy.num_replicas_in_sync());
  if (o.max_steps >= 0) pipeline = pipeline.take(o.max_steps);

  // Checkpoints: resume from the newest complete one, then save every N steps and at the end.
  strata::checkpoint::TrainingPosition pos;
  using Checkpoints = std::conditional_t<strata::checkpoints_supported<S>,
                                         strata::TrainingCheckpoints<S, decltype(model), decltype(opt)>, NoCheckpoints>;
  std::optional<Checkpoints> checkpoints;
  if constexpr (strata::checkpoints_supported<S>)
    if (!o.checkpoint_dir.empty()) checkpoints.emplace(strategy, model, opt, o.checkpoint_dir);
  const strata::checkpoint::RestartReport restarts(checkpoints ? o.checkpoint_dir : "", strategy.is_chief());
  if (checkpoints) {
    if (auto at = checkpoints->restore()) {
      pos = *at;
      if (strategy.is_chief())
        std::printf("resumed from step %lld (epoch %lld, batch %lld) in %s\n", static_cast<long long>(pos.step),
                    static_cast<long long>(pos.epoch), static_cast<long long>(pos.batch), o.checkpoint_dir.c_str());
    }
  }
  restarts.resumed_at(pos.step);
  pipeline.set_position(pos.epoch, pos.batch);
  auto data = strategy.distribute(pipeline);
  const auto test = o.no_eval ? strata::data::TensorDataset() : strata::data::fashion_mnist_test(o.data_dir);

  RunReport report(strategy, o);
  for (int epoch = static_cast<int>(pos.epoch); epoch < o.epochs; ++epoch) {
    std::int64_t batch = epoch == pos.epoch ? pos.batch : 0;  // batches of this epoch done
    report.begin_epoch();
    for (auto& b : data) {
      report.data_ready();
      const double loss = train_step(strategy, model, opt, b, report.times());
      ++batch, ++pos.step;
      report.step(pos.step, epoch, batch, data.num_batches(), b.global_size, loss);
      restarts.reached(pos.step);
      if (checkpoints && o.checkpoint_every > 0 && pos.step % o.checkpoint_every == 0) {
        const bool epoch_done = batch == data.num_batches();  // the position of the next batch
        checkpoints->save({pos.step, epoch + (epoch_done ? 1 : 0), epoch_done ? 0 : batch});
      }
    }
    report.end_epoch();
    if (!o.no_eval) report.evaluation(pos.step, epoch, evaluate(model, test));
  }
  if (checkpoints) checkpoints->save({pos.step, o.epochs, 0});
  report.finish();
}

}  // namespace fmnist

int main(int argc, char** argv) try {
  fmnist::Options o;
  if (const int status = fmnist::parse_options(argc, argv, o); status >= 0) return status;
  strata::kernels::cpu::set_blas_threads(o.threads);
  trainer::with_strategy(o, [&](auto& strategy) { fmnist::train(strategy, o); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  strata::runtime::fail_job(e.what());  // under mpirun: the other ranks stop now, not at their deadlines
  return 1;
}

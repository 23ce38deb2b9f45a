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
#include <algorithm>
#include <string>

#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>

#include "../common/checkpoints.hpp"
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

/// The training loop, the same for every strategy.
template <strata::Strategy S>
void train(S& strategy, const Options& o) {
  strata::manual_seed(o.seed);
  auto model = strategy.scope([&] { return strata::models::fashion_mnist(o.model); });
  auto opt = strategy.scope(
      [&] { return strata::optim::Sgd(model.parameters(), o.lr, {.momentum = o.momentum_or_default()}); });
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();  // fp16
  auto pipeline = strata::data::Pipeline(strata::data::fashion_mnist_train(o.data_dir))
                      .shuffle(o.seed)
                      .batch(trainer::global_batch_of(o, strategy.num_replicas_in_sync()));
  if (o.steps_per_epoch > 0) pipeline = pipeline.take(o.steps_per_epoch);

  // Checkpoints: resume from the newest complete one, then save every N steps and at the end.
  trainer::Checkpoints checkpoints(strategy, model, opt, o);
  const strata::checkpoint::RestartReport restarts(checkpoints.enabled() ? o.checkpoint_dir : "", strategy.is_chief());
  strata::checkpoint::TrainingPosition pos = checkpoints.resume();
  restarts.resumed_at(pos.step);
  const auto test = o.no_eval ? strata::data::TensorDataset() : strata::data::fashion_mnist_test(o.data_dir);
  // The job's batches, epoch after epoch, up to --steps of them: every rank runs the same
  // batches of each epoch (a parameter server's range serves its workers to the end of each,
  // and asynchronous workers share an epoch's batches between them).
  const std::int64_t per_epoch = pipeline.num_batches();
  const std::int64_t total = o.steps > 0 ? o.steps : per_epoch * o.epochs;
  RunReport report(strategy, o);
  for (std::int64_t epoch = pos.epoch; epoch < o.epochs && epoch * per_epoch < total; ++epoch) {
    const std::int64_t first = epoch == pos.epoch ? pos.batch : 0;
    strata::data::Pipeline part = pipeline.take(std::min(per_epoch, total - epoch * per_epoch));
    part.set_position(epoch, first);
    auto data = strategy.distribute(part);
    report.begin_epoch();
    for (auto& b : data) {
      report.data_ready();
      const double loss = train_step(strategy, model, opt, b, report.times());
      pos = pos.after(b, per_epoch);
      report.step(pos.step, static_cast<int>(epoch), b.index + 1, per_epoch, b.global_size, loss);
      restarts.reached(pos.step);
      checkpoints.after_step(pos);
    }
    report.end_epoch();
    if (!o.no_eval) report.evaluation(pos.step, static_cast<int>(epoch), evaluate(model, test));
  }
  checkpoints.finish(pos);
  report.finish();
}

}  // namespace fmnist

int main(int argc, char** argv) try {
  fmnist::Options o;
  if (const int status = fmnist::parse_options(argc, argv, o); status >= 0) return status;
  strata::kernels::cpu::set_blas_threads(o.threads);
  const strata::precision::Scope precision(strata::precision::from_name(o.precision));  // every replica's
  trainer::with_strategy(o, [&](auto& strategy) { fmnist::train(strategy, o); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  strata::runtime::fail_job(e.what());  // under mpirun: the other ranks stop now, not at their deadlines
  return 1;
}

// Fashion-MNIST trainer: the reference MLP or CNN, trained by one loop written as a template
// over the strategy. The strategy is picked at run time (main, at the bottom, maps the flags
// onto the template's instantiations); options.hpp holds the flags, report.hpp what is
// printed and written besides training, step.hpp one step.
//
//   fashion_mnist --model mlp --epochs 3 --seed 0
//   fashion_mnist --model cnn --epochs 1 --batch 64 --lr 0.05 --data /path/to/fashion-mnist
//   fashion_mnist --strategy mirrored --replicas 2                 (two replica threads)
//   mpirun -np 2 fashion_mnist --strategy multi_worker_mirrored --collective mpi
//   strata-run -np 2 fashion_mnist --strategy multi_worker_mirrored --collective gloo
//   mpirun -np 3 fashion_mnist --strategy parameter_server --servers 1 --mode sync|async
//   fashion_mnist_cuda --device cuda:0                              (with the kernels of cuda_kernels.cu)
//   mpirun -np 2 fashion_mnist_cuda --strategy multi_worker_mirrored --collective nccl   (one GPU per rank)
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#if STRATA_HAS_NCCL
#include <strata/collective/nccl.hpp>
#endif

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
  if (checkpoints) {
    if (auto at = checkpoints->restore()) {
      pos = *at;
      if (strategy.is_chief())
        std::printf("resumed from step %lld (epoch %lld, batch %lld) in %s\n", static_cast<long long>(pos.step),
                    static_cast<long long>(pos.epoch), static_cast<long long>(pos.batch), o.checkpoint_dir.c_str());
    }
  }
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

/// Runs f(static_cast<C*>(nullptr)) with the collective C that --collective names (mpi by
/// default); one this build lacks is an error naming how to get it.
template <class F>
void with_collective(const Options& o, F&& f) {
  const std::string c = o.collective.empty() ? "mpi" : o.collective;
#if STRATA_HAS_MPI
  if (c == "mpi") return f(static_cast<strata::collective::Mpi*>(nullptr));
#endif
#if STRATA_HAS_GLOO
  if (c == "gloo") return f(static_cast<strata::collective::Gloo*>(nullptr));
#endif
#if STRATA_HAS_NCCL && (STRATA_HAS_MPI || STRATA_HAS_GLOO)  // NCCL's ranks meet through MPI or Gloo
  if (c == "nccl") return f(static_cast<strata::collective::Nccl*>(nullptr));
#endif
  (void)f;  // a build with no collective at all
  STRATA_THROW(strata::invalid_argument, "strata.example", "this build has no ", c, ": configure with -D", c,
               "=enabled", c == "nccl" ? " (and -Dmpi or -Dgloo), and run the CUDA trainer, fashion_mnist_cuda" : "");
}

/// Runs f(strategy) with the strategy the options name.
template <class F>
void with_strategy(const Options& o, F&& f) {
  if (o.strategy == "one_device") {
    strata::OneDeviceStrategy s(o.parsed_device());
    f(s);
  } else if (o.strategy == "mirrored") {
    strata::MirroredOptions mo;
    if (!o.gradients.empty()) mo.gradients = o.gradients == "sharded" ? strata::GradientLayout::sharded : strata::GradientLayout::whole;
    if (!o.rows.empty()) mo.rows = o.rows == "measured" ? strata::RowSplit::measured : strata::RowSplit::even;
    strata::MirroredStrategy s(o.replicas, mo);
    f(s);
  } else if (o.strategy == "central_storage") {
    strata::CentralStorageStrategy s(o.replicas);
    f(s);
  } else if (o.strategy == "multi_worker_mirrored") {
    const strata::MultiWorkerOptions mw{.compression = o.compression == "fp16"   ? strata::Compression::fp16
                                                       : o.compression == "bf16" ? strata::Compression::bf16
                                                                                 : strata::Compression::none};
    with_collective(o, [&]<class C>(C*) {
      strata::MultiWorkerMirroredStrategy<C> s(mw);  // Nccl: each rank on its local GPU
      f(s);
    });
  } else {  // parameter_server
    const strata::ParameterServerOptions ps{
        .servers = o.servers, .update_on_servers = o.update_on == "servers", .staleness = o.staleness};
    with_collective(o, [&]<class C>(C*) {
      if constexpr (strata::ps::TransportOf<C>) {
        if (o.mode == "sync") {
          strata::ParameterServerStrategy<C, strata::ps::Sync> s(ps);
          f(s);
        } else {
          strata::ParameterServerStrategy<C, strata::ps::Async> s(ps);
          f(s);
        }
      }
    });
  }
}

}  // namespace fmnist

int main(int argc, char** argv) try {
  fmnist::Options o;
  if (const int status = fmnist::parse_options(argc, argv, o); status >= 0) return status;
  strata::kernels::cpu::set_blas_threads(o.threads);
  fmnist::with_strategy(o, [&](auto& strategy) { fmnist::train(strategy, o); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  strata::runtime::fail_job(e.what());  // under mpirun: the other ranks stop now, not at their deadlines
  return 1;
}

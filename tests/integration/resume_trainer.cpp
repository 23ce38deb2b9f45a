// The resume tests' trainer (run_resume.sh): the reference model trained under the strategy
// the flags name, saving a checkpoint every --checkpoint-every steps and at the end, resuming
// from the newest complete one in --checkpoint-dir, with the fault hook live after each step
// (STRATA_FAULT, tests/support/fault.hpp) so a test can kill a rank at a chosen step.
//   resume_trainer --checkpoint-dir DIR [--checkpoint-every N] [--model mlp|cnn|mlp_dropout|mlp_table] [--epochs E]
//                  [--rows N (the first N training images)] [--batch B (the global batch; default 64 per replica)]
//                  [--max-steps S] [--strategy one_device|mirrored|central_storage|
//                  multi_worker_mirrored|sharded|parameter_server] [--replicas R] [--collective mpi|gloo]
//                  [--servers S] [--mode sync] [--update-on servers|workers] [--precision fp32|bf16|fp16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <strata/runtime/fail_job.hpp>
#include <strata/strategy/parameter_server.hpp>
#include "support/fault.hpp"
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

#include "support/train_step.hpp"

namespace {

struct Args {
  std::string dir, model = "mlp", strategy = "one_device", collective = "mpi", update_on = "servers", precision = "fp32";
  std::int64_t every = 0, max_steps = -1, rows = -1, batch = -1;
  int epochs = 1, replicas = 2, servers = 1;
};

/// [N, 784] -> [N, 784 + 8]: the image, then the sum of 16 rows of a row-sparse [16 x 32, 8]
/// table, one per 7 x 7 patch, picked by the patch's mean intensity (mlp_table: a table whose
/// rows and lazy optimizer state a checkpoint must carry).
class PatchTable : public strata::nn::Module {
 public:
  PatchTable()
      : table_(&register_module("table", std::make_unique<strata::nn::Embedding>(16 * 32, 8, strata::TableGradient::row_sparse))) {}
  strata::Tensor forward(const strata::Tensor& x) override {
    const std::int64_t n = x.dim(0);
    const strata::Tensor xc = x.contiguous();
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * 16));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < 16; ++p) {
        double sum = 0;
        for (std::int64_t r = 0; r < 7; ++r)
          for (std::int64_t c = 0; c < 7; ++c) sum += xc.data<float>()[i * 784 + ((p / 4) * 7 + r) * 28 + (p % 4) * 7 + c];
        const auto bucket = std::clamp<std::int64_t>(static_cast<std::int64_t>(sum / 49.0 * 32.0), 0, 31);
        idx[static_cast<std::size_t>(i * 16 + p)] = p * 32 + bucket;
      }
    const strata::Tensor rows = (*table_)(strata::from_vector<std::int64_t>({n, 16}, idx));
    return strata::concat({x, strata::sum(rows, {1})}, 1);
  }

 private:
  strata::nn::Module* table_;
};

template <strata::Strategy S>
void train(S& strategy, const Args& a) {
  strata::manual_seed(0);
  auto model = strategy.scope([&] {
    using namespace strata::nn;
    if (a.model == "mlp_dropout") return Sequential(Flatten(), Linear(784, 128), ReLU(), Dropout(0.3), Linear(128, 10));
    if (a.model == "mlp_table") return Sequential(Flatten(), PatchTable(), Linear(792, 128), ReLU(), Linear(128, 10));
    return strata::models::fashion_mnist(a.model);
  });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();  // fp16
  strata::data::TensorDataset train = strata::data::fashion_mnist_train();
  if (a.rows >= 0)
    train = strata::data::TensorDataset(strata::data::slice_rows(train.x, 0, a.rows), strata::data::slice_rows(train.y, 0, a.rows));
  auto pipeline = strata::data::Pipeline(train).shuffle(0).batch(a.batch > 0 ? a.batch : 64 * strategy.num_replicas_in_sync());
  if (a.max_steps >= 0) pipeline = pipeline.take(a.max_steps);
  strata::TrainingCheckpoints checkpoints(strategy, model, opt, a.dir);
  strata::checkpoint::TrainingPosition pos;
  const strata::checkpoint::RestartReport restarts(a.dir, strategy.is_chief());
  if (auto at = checkpoints.restore()) {
    pos = *at;
    if (strategy.is_chief())
      std::printf("resumed from step %lld (epoch %lld, batch %lld)\n", static_cast<long long>(pos.step),
                  static_cast<long long>(pos.epoch), static_cast<long long>(pos.batch));
  }
  restarts.resumed_at(pos.step);
  pipeline.set_position(pos.epoch, pos.batch);
  auto data = strategy.distribute(pipeline);
  const int rank = strata::runtime::detect_process().rank;
  for (auto epoch = pos.epoch; epoch < a.epochs; ++epoch) {
    for (auto& b : data) {
      (void)support::train_step(strategy, model, opt, b);
      pos = pos.after(b, data.num_batches());
      if (a.every > 0 && pos.step % a.every == 0) checkpoints.save(pos);
      restarts.reached(pos.step);
      STRATA_FAULT_POINT(rank, pos.step, "after_step");
    }
  }
  checkpoints.save({pos.step, a.epochs, 0});
}

template <class F>
void with_strategy(const Args& a, F&& f) {
  if (a.strategy == "one_device") {
    strata::OneDeviceStrategy s;
    f(s);
  } else if (a.strategy == "mirrored") {
    strata::MirroredStrategy s(a.replicas);
    f(s);
  } else if (a.strategy == "central_storage") {
    strata::CentralStorageStrategy s(a.replicas);
    f(s);
  } else if (a.strategy == "multi_worker_mirrored" || a.strategy == "sharded" || a.strategy == "parameter_server") {
    const strata::ParameterServerOptions ps{.servers = a.servers, .update_on_servers = a.update_on == "servers"};
    auto run = [&]<class C>(C*) {
      if (a.strategy == "multi_worker_mirrored") {
        strata::MultiWorkerMirroredStrategy<C> s;
        f(s);
      } else if (a.strategy == "sharded") {
        strata::ShardedStrategy<C> s;
        f(s);
      } else {
        strata::ParameterServerStrategy<C, strata::ps::Sync> s(ps);
        f(s);
      }
    };
#if STRATA_HAS_MPI
    if (a.collective == "mpi") return run(static_cast<strata::collective::Mpi*>(nullptr));
#endif
#if STRATA_HAS_GLOO
    if (a.collective == "gloo") return run(static_cast<strata::collective::Gloo*>(nullptr));
#endif
    STRATA_THROW(strata::invalid_argument, "resume_trainer", "no collective '", a.collective, "' in this build");
  } else {
    STRATA_THROW(strata::invalid_argument, "resume_trainer", "unknown strategy '", a.strategy, "'");
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--checkpoint-dir") a.dir = v;
    else if (flag == "--checkpoint-every") a.every = std::atoll(v.c_str());
    else if (flag == "--model") a.model = v;
    else if (flag == "--epochs") a.epochs = std::atoi(v.c_str());
    else if (flag == "--max-steps") a.max_steps = std::atoll(v.c_str());
    else if (flag == "--rows") a.rows = std::atoll(v.c_str());
    else if (flag == "--batch") a.batch = std::atoll(v.c_str());
    else if (flag == "--strategy") a.strategy = v;
    else if (flag == "--replicas") a.replicas = std::atoi(v.c_str());
    else if (flag == "--collective") a.collective = v;
    else if (flag == "--servers") a.servers = std::atoi(v.c_str());
    else if (flag == "--update-on") a.update_on = v;
    else if (flag == "--precision") a.precision = v;
    else if (flag == "--mode") STRATA_REQUIRE(v == "sync", strata::invalid_argument, "resume_trainer", "--mode sync only");
    else STRATA_THROW(strata::invalid_argument, "resume_trainer", "unknown flag ", flag);
  }
  STRATA_REQUIRE(!a.dir.empty(), strata::invalid_argument, "resume_trainer", "--checkpoint-dir is required");
  const strata::precision::Scope precision(strata::precision::from_name(a.precision));
  with_strategy(a, [&](auto& strategy) { train(strategy, a); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "resume_trainer: %s\n", e.what());
  strata::runtime::fail_job(e.what());
  return 1;
}

// Fashion-MNIST trainer: the reference MLP or CNN, trained by one loop written as a template
// over the strategy (train.hpp). Prints a progress line and the test accuracy per epoch on
// rank 0, then one JSON line with the run's results.
//
//   fashion_mnist --model mlp --epochs 3 --seed 0
//   fashion_mnist --model cnn --epochs 1 --batch 64 --lr 0.05 --data /path/to/fashion-mnist
//   fashion_mnist --strategy mirrored --replicas 2                 (two replica threads)
//   mpirun -np 2 fashion_mnist --strategy multi_worker_mirrored --collective mpi
//   strata-run -np 2 fashion_mnist --strategy multi_worker_mirrored --collective gloo
//   mpirun -np 3 fashion_mnist --strategy parameter_server --servers 1 --mode sync|async
//   strata-run -np 3 fashion_mnist --strategy parameter_server --collective gloo --mode async
//   fashion_mnist_cuda --device cuda:0                              (with the kernels of cuda_kernels.cu)
//   mpirun -np 2 fashion_mnist_cuda --strategy multi_worker_mirrored --collective nccl   (one GPU per rank)
//
// The strategy is chosen at run time by dispatching to the template's instantiations.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "train.hpp"

#include <strata/kernels/cpu/blas_core.hpp>
#include <strata/runtime/fail_job.hpp>

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#if STRATA_HAS_NCCL
#include <strata/collective/nccl.hpp>
#endif
#include <strata/strategy/parameter_server.hpp>

namespace {

/// The default momentum of an asynchronous parameter-server run: with 2 workers, one epoch of
/// the MLP reaches the one-device accuracy at 0.7, not at 0.9 (docs/parameter_server.md).
constexpr double kAsyncMomentum = 0.7;

void usage() {
  std::puts(
      "usage: fashion_mnist [--model mlp|cnn] [--epochs N] [--seed S] [--batch B] [--lr X]\n"
      "                     [--momentum M] [--data DIR] [--threads T] [--max-steps N] [--no-eval] [--quiet]\n"
      "                     [--strategy one_device|mirrored|central_storage|multi_worker_mirrored|parameter_server]\n"
      "                     [--replicas N] [--collective mpi|gloo|nccl] [--compression none|fp16|bf16]\n"
      "                     [--gradients whole|sharded] [--rows even|measured]\n"
      "                     [--device cpu|cuda:N]\n"
      "                     [--servers S] [--mode sync|async] [--staleness N] [--update-on servers|workers]\n"
      "                     [--checkpoint-dir DIR] [--checkpoint-every STEPS]\n"
      "                     [--metrics FILE.csv] [--metrics-every STEPS] [--timeline FILE.json]\n"
      "With --checkpoint-dir the run resumes from the newest complete checkpoint in DIR and saves there\n"
      "every --checkpoint-every steps (and at the end).\n"
      "--metrics writes the chief's per-step figures as CSV (tools/plot_metrics.py draws them); --timeline\n"
      "writes a Chrome trace of every rank (open it in https://ui.perfetto.dev).\n"
      "--batch is per replica: the global batch is B x replicas, and the learning rate applies to it.\n"
      "--gradients sharded (mirrored): each replica keeps the summed gradients of its share only, which\n"
      "its part of the update reads; less traffic between the cores (docs/gradient_engine.md).\n"
      "--rows measured (mirrored): each replica takes a share of the global batch in proportion to its\n"
      "measured speed, so that faster cores do not wait for a slower one (docs/performance.md).\n"
      "--momentum is 0.9 by default, 0.7 under --strategy parameter_server --mode async (asynchrony adds\n"
      "momentum of its own).\n"
      "--device cuda:N (one_device) needs the trainer built with the CUDA kernels: fashion_mnist_cuda.");
}

long long parse_int(const std::string& flag, const char* v) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0') throw strata::invalid_argument("[strata.example] " + flag + " expects an integer, got '" + v + "'");
  return x;
}
double parse_double(const std::string& flag, const char* v) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0') throw strata::invalid_argument("[strata.example] " + flag + " expects a number, got '" + v + "'");
  return x;
}

/// "cpu" or "cuda:N".
strata::Device parse_device(const std::string& s) {
  if (s == "cpu") return strata::Device::cpu();
  if (s.rfind("cuda:", 0) == 0) return strata::Device::cuda(static_cast<int>(parse_int("--device", s.c_str() + 5)));
  throw strata::invalid_argument("[strata.example] --device expects cpu or cuda:N, got '" + s + "'");
}

}  // namespace

int main(int argc, char** argv) try {
  fmnist::Config cfg;
  std::string strategy_name = "one_device", collective, compression = "none", device_name = "cpu", gradients, rows;
  int threads = 1, replicas = 2, servers = 0;
  long long staleness = -1;
  std::string mode, update_on;
  std::optional<double> momentum;  // --momentum; the default depends on --mode
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw strata::invalid_argument("[strata.example] " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") cfg.model = value();
    else if (a == "--epochs") cfg.epochs = static_cast<int>(parse_int(a, value()));
    else if (a == "--seed") cfg.seed = static_cast<std::uint64_t>(parse_int(a, value()));
    else if (a == "--batch") cfg.batch = parse_int(a, value());
    else if (a == "--lr") cfg.lr = parse_double(a, value());
    else if (a == "--momentum") momentum = parse_double(a, value());
    else if (a == "--data") cfg.data_dir = value();
    else if (a == "--strategy") strategy_name = value();
    else if (a == "--device") device_name = value();
    else if (a == "--replicas") replicas = static_cast<int>(parse_int(a, value()));
    else if (a == "--collective") collective = value();
    else if (a == "--compression") compression = value();
    else if (a == "--gradients") gradients = value();
    else if (a == "--rows") rows = value();
    else if (a == "--servers") servers = static_cast<int>(parse_int(a, value()));
    else if (a == "--mode") mode = value();
    else if (a == "--staleness") staleness = parse_int(a, value());
    else if (a == "--update-on") update_on = value();
    else if (a == "--threads") threads = static_cast<int>(parse_int(a, value()));
    else if (a == "--max-steps") cfg.max_steps = parse_int(a, value());
    else if (a == "--no-eval") cfg.evaluate = false;
    else if (a == "--checkpoint-dir") cfg.checkpoint_dir = value();
    else if (a == "--checkpoint-every") cfg.checkpoint_every = parse_int(a, value());
    else if (a == "--metrics") cfg.metrics_path = value();
    else if (a == "--metrics-every") cfg.metrics_every = static_cast<int>(parse_int(a, value()));
    else if (a == "--timeline") cfg.timeline_path = value();
    else if (a == "--quiet") cfg.progress = false;
    else if (a == "--help" || a == "-h") { usage(); return 0; }
    else throw strata::invalid_argument("[strata.example] unknown flag '" + a + "' (try --help)");
  }
  // Asynchrony adds momentum of its own (docs/parameter_server.md, "Async and momentum").
  cfg.momentum = momentum.value_or(strategy_name == "parameter_server" && mode == "async" ? kAsyncMomentum : cfg.momentum);
  if (!(cfg.momentum >= 0)) throw strata::invalid_argument("[strata.example] --momentum must be non-negative");
  if (cfg.epochs < 1) throw strata::invalid_argument("[strata.example] --epochs must be at least 1");
  if (cfg.batch < 1) throw strata::invalid_argument("[strata.example] --batch must be at least 1");
  if (threads < 1) throw strata::invalid_argument("[strata.example] --threads must be at least 1");
  if (cfg.checkpoint_every < 0) throw strata::invalid_argument("[strata.example] --checkpoint-every must be >= 0");
  if (cfg.metrics_every < 1) throw strata::invalid_argument("[strata.example] --metrics-every must be at least 1");
  if (strategy_name == "parameter_server" && mode == "async" && !cfg.checkpoint_dir.empty())
    throw strata::invalid_argument("[strata.example] --checkpoint-dir needs --mode sync under --strategy "
                                   "parameter_server: an asynchronous job has no step at which every server's state "
                                   "is one consistent point");
  if (cfg.checkpoint_every > 0 && cfg.checkpoint_dir.empty())
    throw strata::invalid_argument("[strata.example] --checkpoint-every needs --checkpoint-dir");
  if (cfg.model != "mlp" && cfg.model != "cnn")
    throw strata::invalid_argument("[strata.example] unknown model '" + cfg.model + "' (expected mlp or cnn)");
  strata::kernels::cpu::set_blas_threads(threads);

  if (replicas < 1 || replicas > 16) throw strata::invalid_argument("[strata.example] --replicas must be in 1..16");

  auto train_and_report = [&](auto& strategy) {
    const fmnist::Report r = fmnist::train(strategy, cfg);
    auto json_number = [](double v, const char* fmt) {  // JSON has no NaN: a figure not measured is null
      char buf[32] = "null";
      if (!std::isnan(v)) std::snprintf(buf, sizeof buf, fmt, v);
      return std::string(buf);
    };
    const std::string accuracy = json_number(r.test_accuracy, "%.4f");
    const std::string comm = json_number(r.allreduce_ms_per_step, "%.4f"), hidden = json_number(r.allreduce_hidden, "%.3f");
    const std::string steady = json_number(r.steady_examples_per_s, "%.1f");
    if (strategy.is_chief())
      std::printf("{\"model\":\"%s\",\"strategy\":\"%s\",\"replicas\":%d,\"epochs\":%d,\"seed\":%llu,"
                  "\"batch\":%lld,\"global_batch\":%lld,\"lr\":%g,\"momentum\":%g,\"steps\":%lld,\"final_loss\":%.6f,"
                  "\"test_accuracy\":%s,\"examples_per_s\":%.1f,\"steady_examples_per_s\":%s,\"allreduce_ms_per_step\":%s,\"allreduce_hidden\":%s,"
                  "\"blas_kernels\":\"%s\"}\n",
                  cfg.model.c_str(), strategy.name, strategy.num_replicas_in_sync(), cfg.epochs,
                  static_cast<unsigned long long>(cfg.seed), static_cast<long long>(cfg.batch),
                  static_cast<long long>(cfg.batch * strategy.num_replicas_in_sync()), cfg.lr, cfg.momentum,
                  static_cast<long long>(r.steps), r.final_loss, accuracy.c_str(), r.examples_per_s, steady.c_str(), comm.c_str(),
                  hidden.c_str(), strata::kernels::cpu::blas_core().used.c_str());
  };
  if (compression != "none" && compression != "fp16" && compression != "bf16")
    throw strata::invalid_argument("[strata.example] --compression expects none, fp16 or bf16, got '" + compression + "'");
  if (strategy_name != "multi_worker_mirrored" && compression != "none")
    throw strata::invalid_argument("[strata.example] --compression applies to --strategy multi_worker_mirrored only");
  const strata::MultiWorkerOptions multi_worker{
      .compression = compression == "fp16"   ? strata::Compression::fp16
                     : compression == "bf16" ? strata::Compression::bf16
                                             : strata::Compression::none};
  if (!gradients.empty() && gradients != "whole" && gradients != "sharded")
    throw strata::invalid_argument("[strata.example] --gradients expects whole or sharded, got '" + gradients + "'");
  if (strategy_name != "mirrored" && !gradients.empty())
    throw strata::invalid_argument("[strata.example] --gradients applies to --strategy mirrored only");
  if (!rows.empty() && rows != "even" && rows != "measured")
    throw strata::invalid_argument("[strata.example] --rows expects even or measured, got '" + rows + "'");
  if (strategy_name != "mirrored" && !rows.empty())
    throw strata::invalid_argument("[strata.example] --rows applies to --strategy mirrored only");
  strata::MirroredOptions mirrored;
  if (!gradients.empty())
    mirrored.gradients = gradients == "sharded" ? strata::GradientLayout::sharded : strata::GradientLayout::whole;
  if (!rows.empty()) mirrored.rows = rows == "measured" ? strata::RowSplit::measured : strata::RowSplit::even;
  if (strategy_name != "parameter_server" && (servers != 0 || !mode.empty() || staleness != -1 || !update_on.empty()))
    throw strata::invalid_argument("[strata.example] --servers, --mode, --staleness and --update-on apply to --strategy "
                                   "parameter_server only");
  if (strategy_name != "multi_worker_mirrored" && strategy_name != "parameter_server" && !collective.empty())
    throw strata::invalid_argument("[strata.example] --collective applies to --strategy multi_worker_mirrored or "
                                   "parameter_server only");
  const strata::Device device = parse_device(device_name);
  if (device.kind != strata::DeviceKind::cpu && strategy_name != "one_device")
    throw strata::invalid_argument("[strata.example] --device applies to --strategy one_device only (the other "
                                   "strategies run on the CPU in this trainer)");
  if (strategy_name == "one_device") {
    strata::OneDeviceStrategy s(device);
    train_and_report(s);
  } else if (strategy_name == "mirrored") {
    strata::MirroredStrategy s(replicas, mirrored);
    train_and_report(s);
  } else if (strategy_name == "central_storage") {
    strata::CentralStorageStrategy s(replicas);
    train_and_report(s);
  } else if (strategy_name == "multi_worker_mirrored") {
    if (collective == "mpi") {
#if STRATA_HAS_MPI
      strata::MultiWorkerMirroredStrategy<strata::collective::Mpi> s(multi_worker);
      train_and_report(s);
#else
      throw strata::invalid_argument("[strata.example] this build has no MPI (configure with -Dmpi=enabled)");
#endif
    } else if (collective == "gloo") {
#if STRATA_HAS_GLOO
      strata::MultiWorkerMirroredStrategy<strata::collective::Gloo> s(multi_worker);
      train_and_report(s);
#else
      throw strata::invalid_argument("[strata.example] this build has no Gloo (configure with -Dgloo=enabled)");
#endif
    } else if (collective == "nccl") {
#if STRATA_HAS_NCCL
      strata::MultiWorkerMirroredStrategy<strata::collective::Nccl> s(multi_worker);  // each rank on its local GPU
      train_and_report(s);
#else
      throw strata::invalid_argument("[strata.example] --collective nccl needs the CUDA trainer "
                                     "(fashion_mnist_cuda) of a build with -Dnccl=enabled");
#endif
    } else {
      throw strata::invalid_argument("[strata.example] --strategy multi_worker_mirrored needs --collective mpi, "
                                     "gloo or nccl, got '" + collective + "'");
    }
  } else if (strategy_name == "parameter_server") {
    if (mode.empty()) mode = "sync";
    if (update_on.empty()) update_on = "servers";
    if (mode != "sync" && mode != "async")
      throw strata::invalid_argument("[strata.example] --mode expects sync or async, got '" + mode + "'");
    if (update_on != "servers" && update_on != "workers")
      throw strata::invalid_argument("[strata.example] --update-on expects servers or workers, got '" + update_on + "'");
    if (servers < 0) throw strata::invalid_argument("[strata.example] --servers must be at least 1");
    const strata::ParameterServerOptions o{.servers = servers, .update_on_servers = update_on == "servers",
                                           .staleness = staleness};
    auto run_ps = [&]<class C>(C*) {
      if (mode == "sync") {
        strata::ParameterServerStrategy<C, strata::ps::Sync> s(o);
        train_and_report(s);
      } else {
        strata::ParameterServerStrategy<C, strata::ps::Async> s(o);
        train_and_report(s);
      }
    };
    if (collective.empty() || collective == "mpi") {
#if STRATA_HAS_MPI
      run_ps(static_cast<strata::collective::Mpi*>(nullptr));
#else
      throw strata::invalid_argument("[strata.example] this build has no MPI (configure with -Dmpi=enabled)");
#endif
    } else if (collective == "gloo") {
#if STRATA_HAS_GLOO
      run_ps(static_cast<strata::collective::Gloo*>(nullptr));
#else
      throw strata::invalid_argument("[strata.example] this build has no Gloo (configure with -Dgloo=enabled)");
#endif
    } else {
      throw strata::invalid_argument("[strata.example] --collective expects mpi or gloo, got '" + collective + "'");
    }
  } else {
    throw strata::invalid_argument("[strata.example] unknown strategy '" + strategy_name +
                                   "' (expected one_device, mirrored, central_storage, multi_worker_mirrored or "
                                   "parameter_server)");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  strata::runtime::fail_job(e.what());  // under mpirun: the other ranks stop now, not at their deadlines
  return 1;
}

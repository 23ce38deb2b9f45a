// An elastic trainer for the run_elastic*.sh scripts (under strata-run --elastic), through
// elastic::Trainer<Gloo>, per-rank batch 16 (32 on Fashion-MNIST); built with
// -DELASTIC_SHARD_STAGE=S, through elastic::Trainer<Gloo, ShardedStrategy<Gloo, stage S>>
// (stage 3: each Linear a wrap unit), its state moving through sharded checkpoints in
// CHECKPOINT_DIR every EVERY steps (8 unless given). DATA is "synthetic" (a
// small regression model on 1000 fixed examples) or a Fashion-MNIST directory (an MLP, and
// the test accuracy at the end). FAULTS lists what the process started as rank R does to
// itself ("-" for nothing), comma-separated:
//   R@S        SIGKILL before global step S
//   R@S:stop   SIGSTOP before global step S (the script sends SIGCONT later)
//   R@gG       SIGKILL as generation G builds its model (mid-change: the others wait in the
//              broadcast of its parameters)
// A process started outside strata-run with the job's STRATA_ELASTIC, STRATA_MASTER_ADDR/PORT
// and STRATA_JOB_TOKEN joins at the next step boundary. STEP_MS slows each step; SEED (default
// 11) draws the initial parameters and each epoch's order. Each process
// logs, one line each:
//   start <unix ms>       pid <pid>
//   kill <unix ms> | stop <unix ms>                    (a fault, just before it)
//   generation G rank R of N resumes at step S offset O epoch E after <reason>
//   first step of generation G done at <unix ms>
//   step S generation G epoch E rows i,j,...           (the rows this rank trained at step S)
//   done: step S generation G parameters <hash> on N ranks [test accuracy A]
//
//   elastic_trainer DATA EPOCHS FAULTS [STEP_MS [SEED [CHECKPOINT_DIR [EVERY]]]]
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/elastic.hpp>

using namespace strata;

namespace {
long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// FNV-1a over the parameters' bytes: equal on every rank iff the parameters are bit-identical.
long long hash_of(const std::vector<Tensor>& params) {
  std::uint64_t h = 1469598103934665603ull;
  for (const Tensor& p : params) {
    const auto* b = static_cast<const unsigned char*>(p.raw_data());
    for (std::size_t i = 0; i < static_cast<std::size_t>(p.numel()) * size_of(p.dtype()); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return static_cast<long long>(h >> 1);
}

struct Fault {
  int rank = -1;
  std::int64_t step = -1;        // before this global step
  std::uint64_t generation = 0;  // or as this generation begins
  bool stop = false;             // SIGSTOP, not SIGKILL
};

std::vector<Fault> parse_faults(const std::string& s) {
  std::vector<Fault> out;
  if (s == "-") return out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t end = std::min(s.find(',', at), s.size());
    const std::string f = s.substr(at, end - at);
    const std::size_t sep = f.find('@');
    if (sep == std::string::npos) throw std::runtime_error("a fault is R@S, R@S:stop or R@gG, got '" + f + "'");
    Fault x;
    x.rank = std::stoi(f.substr(0, sep));
    std::string when = f.substr(sep + 1);
    if (when.size() > 5 && when.substr(when.size() - 5) == ":stop") {
      x.stop = true;
      when.resize(when.size() - 5);
    }
    if (!when.empty() && when[0] == 'g')
      x.generation = std::stoull(when.substr(1));
    else
      x.step = std::stoll(when);
    out.push_back(x);
    at = end + 1;
  }
  return out;
}

void fault(const char* what, int sig) {
  std::printf("%s %lld\n", what, unix_ms());
  std::fflush(stdout);
  std::raise(sig);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 8) {
    std::fprintf(stderr, "usage: elastic_trainer DATA EPOCHS FAULTS [STEP_MS [SEED [CHECKPOINT_DIR [EVERY]]]]\n");
    return 2;
  }
  std::printf("start %lld pid %d\n", unix_ms(), static_cast<int>(::getpid()));
  const std::string source = argv[1];
  const bool synthetic = source == "synthetic";
  const int step_ms = argc >= 5 ? std::atoi(argv[4]) : 0;
  const std::uint64_t seed = argc >= 6 ? std::strtoull(argv[5], nullptr, 10) : 11;
  manual_seed(seed);
  const int started_as = runtime::detect_process().rank;
  try {
    const std::vector<Fault> faults = parse_faults(argv[3]);
    data::TensorDataset train;
    if (synthetic) {  // y = x·w + noise, the same on every process
      Generator g(7);
      const Tensor x = normal({1000, 16}, 0.0, 1.0, g), w = normal({16, 1}, 0.0, 1.0, g);
      train = data::TensorDataset(x, add(matmul(x, w), normal({1000, 1}, 0.0, 0.1, g)));
    } else {
      train = data::fashion_mnist_train(source);
    }
    elastic::TrainOptions o;
    o.epochs = std::atoll(argv[2]);
    o.per_replica_batch = synthetic ? 16 : 32;
    o.seed = seed;
    if (argc >= 7) o.checkpoint_dir = argv[6];
    o.checkpoint_every = argc == 8 ? std::atoll(argv[7]) : 8;
#ifdef ELASTIC_SHARD_STAGE
    o.sharding.wrap_units = {synthetic ? "0" : "1", synthetic ? "2" : "3"};
    elastic::Trainer<collective::Gloo, ShardedStrategy<collective::Gloo, ShardStage(ELASTIC_SHARD_STAGE)>> trainer(train, o);
#else
    elastic::Trainer<collective::Gloo> trainer(train, o);
#endif
    trainer.on_generation([&](const elastic::Progress& p) {
      std::printf("generation %llu rank %d of %d resumes at step %lld offset %lld epoch %lld after %s\n",
                  static_cast<unsigned long long>(p.generation), p.rank, p.workers, static_cast<long long>(p.step),
                  static_cast<long long>(p.offset), static_cast<long long>(p.epoch), p.resumed_after.c_str());
      std::fflush(stdout);
    });
    auto make_model = [&] {  // inside the strategy's scope: the others wait in its broadcast
      for (const Fault& f : faults)
        if (f.rank == started_as && f.generation == trainer.member().generation()) fault("kill", SIGKILL);
      using namespace nn;
      return synthetic ? Sequential(Linear(16, 32), ReLU(), Linear(32, 1))
                       : Sequential(Flatten(), Linear(784, 128), ReLU(), Linear(128, 10));
    };
    auto make_optimizer = [&](auto& model) { return optim::Sgd(model.parameters(), synthetic ? 0.02 : 0.05, 0.9); };
    auto model = trainer.run(make_model, make_optimizer, [&](auto& strategy, auto& model, auto& opt, const data::Batch& batch) {
      const elastic::Progress& p = trainer.progress();
      for (const Fault& f : faults)
        if (f.rank == started_as && f.step == p.step) fault(f.stop ? "stop" : "kill", f.stop ? SIGSTOP : SIGKILL);
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
        Tensor loss = synthetic ? nn::mse_loss(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size)
                                : nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
        opt.apply_gradients(ctx, grad(loss, model.parameters()));
        return loss;
      }, batch);
      std::string list;
      for (std::int64_t r : p.rows) list += (list.empty() ? "" : ",") + std::to_string(r);
      std::printf("step %lld generation %llu epoch %lld rows %s\n", static_cast<long long>(p.step),
                  static_cast<unsigned long long>(p.generation), static_cast<long long>(p.epoch), list.empty() ? "-" : list.c_str());
      if (p.first_of_generation)
        std::printf("first step of generation %llu done at %lld\n", static_cast<unsigned long long>(p.generation), unix_ms());
      std::fflush(stdout);
    });
    const elastic::Progress& p = trainer.progress();
    std::string accuracy;
    if (!synthetic && p.rank == 0) {
      OneDeviceStrategy one;
      metrics::Accuracy acc;
      evaluate(one, model, data::Pipeline(data::fashion_mnist_test(source)).batch(1000), acc);
      accuracy = " test accuracy " + std::to_string(acc.result(one));
    }
    std::printf("done: step %lld generation %llu parameters %lld on %d ranks%s\n", static_cast<long long>(p.step),
                static_cast<unsigned long long>(p.generation), hash_of(model.parameters()), p.workers, accuracy.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_trainer: %s\n", e.what());
    return 1;
  }
}

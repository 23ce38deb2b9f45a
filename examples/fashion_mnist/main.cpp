// Fashion-MNIST trainer: the reference MLP or CNN, trained by one loop written as a template
// over the strategy (train.hpp). Prints a progress line and the test accuracy per epoch on
// rank 0, then one JSON line with the run's results.
//
//   fashion_mnist --model mlp --epochs 3 --seed 0
//   fashion_mnist --model cnn --epochs 1 --batch 64 --lr 0.05 --data /path/to/fashion-mnist
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "train.hpp"

namespace {

void usage() {
  std::puts(
      "usage: fashion_mnist [--model mlp|cnn] [--epochs N] [--seed S] [--batch B] [--lr X]\n"
      "                     [--momentum M] [--data DIR] [--strategy one_device] [--threads T]\n"
      "                     [--max-steps N] [--no-eval] [--quiet]");
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

}  // namespace

int main(int argc, char** argv) try {
  fmnist::Config cfg;
  std::string strategy_name = "one_device";
  int threads = 1;
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
    else if (a == "--momentum") cfg.momentum = parse_double(a, value());
    else if (a == "--data") cfg.data_dir = value();
    else if (a == "--strategy") strategy_name = value();
    else if (a == "--threads") threads = static_cast<int>(parse_int(a, value()));
    else if (a == "--max-steps") cfg.max_steps = parse_int(a, value());
    else if (a == "--no-eval") cfg.evaluate = false;
    else if (a == "--quiet") cfg.progress = false;
    else if (a == "--help" || a == "-h") { usage(); return 0; }
    else throw strata::invalid_argument("[strata.example] unknown flag '" + a + "' (try --help)");
  }
  if (cfg.epochs < 1) throw strata::invalid_argument("[strata.example] --epochs must be at least 1");
  if (cfg.batch < 1) throw strata::invalid_argument("[strata.example] --batch must be at least 1");
  if (threads < 1) throw strata::invalid_argument("[strata.example] --threads must be at least 1");
  if (cfg.model != "mlp" && cfg.model != "cnn")
    throw strata::invalid_argument("[strata.example] unknown model '" + cfg.model + "' (expected mlp or cnn)");
  strata::kernels::cpu::set_blas_threads(threads);

  if (strategy_name != "one_device")
    throw strata::invalid_argument("[strata.example] unknown strategy '" + strategy_name + "' (this build has: one_device)");
  strata::OneDeviceStrategy strategy;
  const fmnist::Report r = fmnist::train(strategy, cfg);
  if (strategy.is_chief())
    std::printf("{\"model\":\"%s\",\"strategy\":\"%s\",\"replicas\":%d,\"epochs\":%d,\"seed\":%llu,\"batch\":%lld,"
                "\"lr\":%g,\"steps\":%lld,\"final_loss\":%.6f,\"test_accuracy\":%.4f,\"examples_per_s\":%.1f}\n",
                cfg.model.c_str(), strategy_name.c_str(), strategy.num_replicas_in_sync(), cfg.epochs,
                static_cast<unsigned long long>(cfg.seed), static_cast<long long>(cfg.batch), cfg.lr,
                static_cast<long long>(r.steps), r.final_loss, r.test_accuracy, r.examples_per_s);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  return 1;
}

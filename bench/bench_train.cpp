// strata's side of bench/train_vs_pytorch.py: trains the reference model on Fashion-MNIST
// for a fixed number of steps on one thread and prints the median step time after warm-up,
// the examples/s it implies, and the peak RSS, as one JSON line. Each timed step ends with the
// loss on the host, so on a GPU it covers the batch's copy in and all the step's kernels.
//
//   bench_train --model mlp|cnn [--steps N] [--warmup W] [--batch B] [--data DIR] [--precision fp32|bf16|fp16]
//   bench_train_cuda ... --device cuda:0        (the same program with the CUDA kernels)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/train_step.hpp"

int main(int argc, char** argv) try {
  std::string model_name = "mlp", dir = strata::data::default_fashion_mnist_dir();
  long steps = -1, warmup = 30, batch = 64;
  strata::Device device = strata::Device::cpu();
  strata::precision::Policy precision = strata::precision::float32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model_name = argv[i + 1];
    else if (a == "--steps") steps = std::atol(argv[i + 1]);
    else if (a == "--warmup") warmup = std::atol(argv[i + 1]);
    else if (a == "--batch") batch = std::atol(argv[i + 1]);
    else if (a == "--data") dir = argv[i + 1];
    else if (a == "--precision") precision = strata::precision::from_name(argv[i + 1]);
    else if (a == "--device") device = std::string(argv[i + 1]) == "cpu" ? strata::Device::cpu()
                                       : strata::Device::cuda(std::atoi(argv[i + 1] + 5));
    else throw strata::invalid_argument("unknown flag " + a);
  }
  if (steps < 0) steps = model_name == "mlp" ? 300 : 120;
  strata::kernels::cpu::set_blas_threads(1);
  const strata::precision::Scope policy(precision);
  strata::manual_seed(0);
  strata::OneDeviceStrategy strategy(device);
  auto model = strategy.scope([&] { return strata::models::fashion_mnist(model_name); });
  strata::optim::Sgd opt(model.parameters(), 0.05, 0.9);
  if (strata::precision::needs_loss_scale(precision)) opt.set_loss_scale();  // fp16
  auto data = strategy.distribute(
      strata::data::Pipeline(strata::data::fashion_mnist_train(dir)).shuffle(0).batch(batch).take(warmup + steps));
  std::vector<double> ms;
  using Clock = std::chrono::steady_clock;
  for (auto& b : data) {
    const auto t0 = Clock::now();
    (void)support::train_step(strategy, model, opt, b);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<double> timed(ms.begin() + std::min<long>(warmup, static_cast<long>(ms.size())), ms.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed.empty() ? 0 : timed[timed.size() / 2];
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("{\"impl\":\"strata\",\"device\":\"%s\",\"precision\":\"%s\",\"batch\":%ld,\"model\":\"%s\",\"steps\":%zu,"
              "\"median_step_ms\":%.4f,\"examples_per_s\":%.1f,"
              "\"peak_rss_mib\":%.1f}\n",
              device.kind == strata::DeviceKind::cpu ? "cpu" : "cuda", strata::precision::name_of(precision), batch, model_name.c_str(), timed.size(), median,
              median > 0 ? 1000.0 * static_cast<double>(batch) / median : 0.0,
              static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_train: %s\n", e.what());
  return 1;
}

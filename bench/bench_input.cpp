// strata's side of bench/input_vs_pytorch.py: assembles shuffled Fashion-MNIST batches (the
// rows of one batch gathered from the 60,000-row training set, on the calling thread, as a
// replica does between steps) and prints the median time per batch after warm-up as one
// JSON line.
//
//   bench_input [--batches N] [--warmup W] [--batch B] [--data DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/strata.hpp>

int main(int argc, char** argv) try {
  std::string dir = strata::data::default_fashion_mnist_dir();
  long batches = 400, warmup = 20, batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batches") batches = std::atol(argv[i + 1]);
    else if (a == "--warmup") warmup = std::atol(argv[i + 1]);
    else if (a == "--batch") batch = std::atol(argv[i + 1]);
    else if (a == "--data") dir = argv[i + 1];
    else throw strata::invalid_argument("unknown flag " + a);
  }
  auto pipeline = strata::data::Pipeline(strata::data::fashion_mnist_train(dir)).shuffle(0).batch(batch).take(warmup + batches);
  std::vector<double> us;
  using Clock = std::chrono::steady_clock;
  double checksum = 0;  // reads one value of every batch, so nothing is optimized away
  auto from = Clock::now();
  for (auto& b : pipeline) {
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - from).count());
    checksum += static_cast<double>(b.x.data<float>()[b.x.numel() - 1]);
    from = Clock::now();
  }
  std::vector<double> timed(us.begin() + std::min<long>(warmup, static_cast<long>(us.size())), us.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed.empty() ? 0 : timed[timed.size() / 2];
  std::printf("{\"impl\":\"strata\",\"batch\":%ld,\"batches\":%zu,\"median_batch_us\":%.2f,\"examples_per_s\":%.1f,"
              "\"checksum\":%.3f}\n",
              batch, timed.size(), median, median > 0 ? 1e6 * static_cast<double>(batch) / median : 0.0, checksum);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_input: %s\n", e.what());
  return 1;
}

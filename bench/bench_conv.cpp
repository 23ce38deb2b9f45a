// The reference ResNet's convolutions (models/fashion_mnist.hpp) one at a time at batch 64,
// forward and backward, under float32 and under a 16-bit policy in the same run: where a
// 16-bit step gains and where it does not. One JSON line per convolution: the fastest of
// --reps passes of each (a pass's backward differentiates the sum of the output, so the
// input's and the weight's gradients are both computed, the stem's input's excepted, as in
// training), and float32's time over the 16-bit one's; then the sums over the convolutions.
// bench/conv_vs_pytorch.py runs PyTorch over the same shapes beside it.
//
//   bench_conv [--precision bf16|fp16] [--reps 30] [--batch 64] [--conv NAME]   (NAME: a part of one's name)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <strata/strata.hpp>

namespace {

struct ConvCase {
  const char* name;
  std::int64_t in, size, out, kernel, stride, pad;
  bool input_grad;  // the stem's input is the data, which needs no gradient
};

constexpr ConvCase kResNet[] = {
    {"stem 3x3 1-32 at 28", 1, 28, 32, 3, 1, 1, false},
    {"block1.conv1 3x3/2 32-32 at 28", 32, 28, 32, 3, 2, 1, true},
    {"block1.conv2 3x3 32-32 at 14", 32, 14, 32, 3, 1, 1, true},
    {"block1.downsample 1x1/2 32-32 at 28", 32, 28, 32, 1, 2, 0, true},
    {"block2.conv1 3x3/2 32-64 at 14", 32, 14, 64, 3, 2, 1, true},
    {"block2.conv2 3x3 64-64 at 7", 64, 7, 64, 3, 1, 1, true},
    {"block2.downsample 1x1/2 32-64 at 14", 32, 14, 64, 1, 2, 0, true},
    {"block3.conv1 3x3/2 64-128 at 7", 64, 7, 128, 3, 2, 1, true},
    {"block3.conv2 3x3 128-128 at 4", 128, 4, 128, 3, 1, 1, true},
    {"block3.downsample 1x1/2 64-128 at 7", 64, 7, 128, 1, 2, 0, true},
};

struct Times {
  double forward_ms = 1e300, backward_ms = 1e300;
};

Times time_conv(const ConvCase& c, std::int64_t batch, int reps, strata::precision::Policy policy) {
  using namespace strata;
  const precision::Scope scope(policy);
  Generator gen(7);
  Tensor x = uniform({batch, c.in, c.size, c.size}, -1.0, 1.0, gen);
  Tensor w = uniform({c.out, c.in, c.kernel, c.kernel}, -0.5, 0.5, gen);
  if (c.input_grad) x.requires_grad_(true);
  w.requires_grad_(true);
  Times t;
  using ms = std::chrono::duration<double, std::milli>;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = conv2d(x, w, {}, c.stride, c.pad);
    const auto t1 = std::chrono::steady_clock::now();
    Tensor loss = sum(y);
    const auto t2 = std::chrono::steady_clock::now();
    backward(loss);
    const auto t3 = std::chrono::steady_clock::now();
    t.forward_ms = std::min(t.forward_ms, ms(t1 - t0).count());
    t.backward_ms = std::min(t.backward_ms, ms(t3 - t2).count());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) try {
  strata::precision::Policy low = strata::precision::bfloat16;
  int reps = 30;
  std::int64_t batch = 64;
  std::string only;  // a part of the names of the convolutions to time; empty: all of them
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--precision") low = strata::precision::from_name(argv[i + 1]);
    else if (a == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--batch") batch = std::max(1L, std::atol(argv[i + 1]));
    else if (a == "--conv") only = argv[i + 1];
    else throw strata::invalid_argument("unknown flag " + a + " (expected --precision, --reps, --batch, --conv)");
  }
  strata::kernels::cpu::set_blas_threads(1);
  double total32 = 0, total16 = 0;
  for (const ConvCase& c : kResNet) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const Times f32 = time_conv(c, batch, reps, strata::precision::float32);
    const Times f16 = time_conv(c, batch, reps, low);
    total32 += f32.forward_ms + f32.backward_ms;
    total16 += f16.forward_ms + f16.backward_ms;
    std::printf("{\"bench\":\"conv\",\"conv\":\"%s\",\"in\":%lld,\"size\":%lld,\"out\":%lld,\"kernel\":%lld,"
                "\"stride\":%lld,\"pad\":%lld,\"input_grad\":%s,\"batch\":%lld,\"precision\":\"%s\","
                "\"fp32_forward_ms\":%.4f,\"forward_ms\":%.4f,\"forward_speedup\":%.3f,\"fp32_backward_ms\":%.4f,"
                "\"backward_ms\":%.4f,\"backward_speedup\":%.3f}\n",
                c.name, static_cast<long long>(c.in), static_cast<long long>(c.size), static_cast<long long>(c.out),
                static_cast<long long>(c.kernel), static_cast<long long>(c.stride), static_cast<long long>(c.pad),
                c.input_grad ? "true" : "false", static_cast<long long>(batch), strata::precision::name_of(low),
                f32.forward_ms, f16.forward_ms, f32.forward_ms / f16.forward_ms, f32.backward_ms, f16.backward_ms,
                f32.backward_ms / f16.backward_ms);
  }
  std::printf("{\"bench\":\"conv\",\"conv\":\"all\",\"batch\":%lld,\"precision\":\"%s\",\"fp32_ms\":%.4f,\"ms\":%.4f,"
              "\"speedup\":%.3f}\n",
              static_cast<long long>(batch), strata::precision::name_of(low), total32, total16, total32 / total16);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_conv: %s\n", e.what());
  return 1;
}

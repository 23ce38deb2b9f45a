// Float GEMM throughput, one thread: strata's AVX-512 kernel against OpenBLAS (whatever kernels
// it runs in this process: OPENBLAS_CORETYPE names them), or against the built-in blocked kernel
// in a build without OpenBLAS, on the shapes of the reference models' layers. The two run in
// alternating rounds of the same process; one JSON line per shape with the median GFLOP/s of
// each and their ratio (docs/performance.md, "GEMM kernels"). With --cold every call is timed
// alone after 64 MiB of other memory was written, so that its operands and output come from
// memory, as a layer's do in a training step whose activations outgrow the caches. With --bf16
// the rounds alternate strata's bfloat16 GEMM (gemm_bf16.hpp, the kernel this CPU gets) with
// the float GEMM a float32 step runs (gemm()), on the same shapes: bench/gemm_vs_pytorch.py sets
// them beside PyTorch's.
//
//   OPENBLAS_NUM_THREADS=1 build/bench/bench_gemm [--rounds 9] [--cold] [--bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/cpu/gemm_bf16.hpp>

namespace kc = strata::kernels::cpu;

namespace {

struct Shape {
  const char* what;
  std::int64_t m, n, k;
  bool ta, tb;
};

using GemmFn = void (*)(const kc::GemmArgs<float>&);

// Seconds per call: as many calls as fill about 50 ms, timed together.
double seconds_per_call(GemmFn f, const kc::GemmArgs<float>& g) {
  const double flops = 2.0 * static_cast<double>(g.m * g.n * g.k);
  const int calls = std::max(3, static_cast<int>(5e9 / flops));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f(g);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// Seconds per call, each call timed alone after every line of `evict` was written.
double seconds_per_cold_call(GemmFn f, const kc::GemmArgs<float>& g, std::vector<float>& evict) {
  const double flops = 2.0 * static_cast<double>(g.m * g.n * g.k);
  const int calls = std::max(3, static_cast<int>(1e9 / flops));
  double seconds = 0;
  for (int i = 0; i < calls; ++i) {
    for (std::size_t k = 0; k < evict.size(); k += 16) evict[k] += 1.0f;
    const auto t0 = std::chrono::steady_clock::now();
    f(g);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  bool cold = false, bf16 = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--cold") == 0) cold = true;
    if (std::strcmp(argv[i], "--bf16") == 0) bf16 = true;
  }
#ifndef STRATA_GEMM_AVX512
  (void)rounds;
  (void)cold;
  (void)bf16;
  std::printf("{\"bench\": \"gemm\", \"skipped\": \"strata's AVX-512 GEMM is built for x86-64 with GCC or clang only\"}\n");
}
#else
  if (!kc::has_avx512f() && !bf16) {
    std::printf("{\"bench\": \"gemm\", \"skipped\": \"this CPU has no AVX-512: strata's AVX-512 GEMM cannot run\"}\n");
    return 0;
  }
#if STRATA_HAS_BLAS
  kc::set_blas_threads(1);
  GemmFn peer = &kc::gemm_blas<float>;
  std::string peer_name = "openblas-" + kc::blas_core().used;
#else
  GemmFn peer = &kc::gemm_builtin<float>;
  std::string peer_name = "builtin";
#endif
  GemmFn ours_fn = &kc::gemm_avx512;
  if (bf16) {  // the bfloat16 GEMM against the float one a float32 step runs
    ours_fn = &kc::gemm_bf16;
    peer = &kc::gemm<float>;
    peer_name = "strata-float32 (" + kc::gemm_kernel().name + ")";
  }
  // The character Transformer's (batch 32 x context 64 tokens, width 128) and the ResNet's
  // (batch 64, a 64-channel 3 x 3 layer on 7 x 7 planes) products, forward and backward.
  const Shape shapes[] = {
      {"transformer qkv: x W^T", 2048, 384, 128, false, true},
      {"transformer mlp up: x W^T", 2048, 512, 128, false, true},
      {"transformer mlp down: x W^T", 2048, 128, 512, false, true},
      {"transformer mlp up dX: G W", 2048, 128, 512, false, false},
      {"transformer mlp down dX: G W", 2048, 512, 128, false, false},
      {"transformer qkv dX: G W", 2048, 128, 384, false, false},
      {"transformer mlp up dW: G^T X", 512, 128, 2048, true, false},
      {"transformer qkv dW: G^T X", 384, 128, 2048, true, false},
      {"transformer proj dW: G^T X", 128, 128, 2048, true, false},
      {"attention: P V", 64, 32, 64, false, false},
      {"resnet conv: W cols", 64, 3136, 576, false, false},
      {"resnet conv dW: G cols^T", 64, 576, 3136, false, true},
      {"resnet conv dx: W^T G", 576, 3136, 64, true, false},
      {"square", 512, 512, 512, false, false},
  };
  std::vector<float> evict(cold ? std::size_t{16} << 20 : 0);  // 64 MiB: twice the largest L3 here
  const auto time = [&](GemmFn f, const kc::GemmArgs<float>& g) {
    return cold ? seconds_per_cold_call(f, g, evict) : seconds_per_call(f, g);
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n)),
        c(static_cast<std::size_t>(s.m * s.n));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    const kc::GemmArgs<float> g{s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), s.ta ? s.m : s.k,
                                b.data(), s.tb ? s.k : s.n, 0.0f, c.data(), s.n};
    std::vector<double> mine, theirs;
    for (int r = 0; r < rounds; ++r) {
      mine.push_back(time(ours_fn, g));
      theirs.push_back(time(peer, g));
    }
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const double ours = flops / median(mine) / 1e9, peers = flops / median(theirs) / 1e9;
    if (bf16) {
      std::printf(
          "{\"bench\": \"gemm_bf16\", \"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"trans_a\": %d, "
          "\"trans_b\": %d, \"operands\": \"%s\", \"rounds\": %d, \"bf16_kernel\": \"%s\", \"bf16_gflops\": %.1f, "
          "\"float\": \"%s\", \"float_gflops\": %.1f, \"ratio\": %.3f}\n",
          s.what, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), s.ta, s.tb,
          cold ? "cold" : "hot", rounds, kc::bf16_gemm_kernel().name.c_str(), ours, peer_name.c_str(), peers, ours / peers);
      continue;
    }
    std::printf(
        "{\"bench\": \"gemm\", \"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"trans_a\": %d, "
        "\"trans_b\": %d, \"operands\": \"%s\", \"rounds\": %d, \"strata_avx512_gflops\": %.1f, \"peer\": \"%s\", \"peer_gflops\": %.1f, "
        "\"ratio\": %.3f}\n",
        s.what, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), s.ta, s.tb,
        cold ? "cold" : "hot", rounds, ours, peer_name.c_str(), peers, ours / peers);
  }
}
#endif

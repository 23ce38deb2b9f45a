// strata::collective::Gloo beside raw Gloo in the same run (strata-run -np 2), on the same
// Gloo context: allreduce through gloo::allreduce with Gloo's own sum, through the classic
// AllreduceRingChunked and AllreduceHalvingDoubling algorithms, and through strata; median of
// the slowest rank's time
// per size; busbw as in nccl-tests (PERF.md). One JSON line per size, with strata / best raw.
//
//   strata-run -np 2 bench_collectives_gloo [--max-bytes 67108864]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>

#include <strata/collective/gloo.hpp>

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  std::size_t max_bytes = std::size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  strata::collective::Gloo c("bench");
  // Gloo's own algorithms run on the same context (same device, same connections), so the
  // comparison is of the calls alone.
  const std::shared_ptr<gloo::Context> ctx = c.context();
  STRATA_CHECK(ctx != nullptr, "bench_collectives_gloo needs at least 2 ranks (strata-run -np 2)");
  const double n = c.size();
  auto slowest = [&](double s) {
    std::vector<double> v{s};
    c.allreduce(std::span(v), strata::ReduceOp::Max);
    return v[0];
  };
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / 4;
    std::vector<float> x(count, 1.0f);
    const int iters = bytes <= (1u << 20) ? 100 : bytes <= (16u << 20) ? 20 : 9;
    std::vector<float*> ptrs{x.data()};
    gloo::AllreduceRingChunked<float> ring(ctx, ptrs, static_cast<int>(count));
    gloo::AllreduceHalvingDoubling<float> hd(ctx, ptrs, static_cast<int>(count));
    std::vector<double> t_new, t_ring, t_hd, t_strata;
    auto time = [&](auto&& f) {
      c.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      f();
      return slowest(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    for (int it = 0; it < iters; ++it) {
      auto raw_new = [&] {
        t_new.push_back(time([&] {
          gloo::AllreduceOptions o(ctx);
          o.setOutput(x.data(), count);
          o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          gloo::allreduce(o);
        }));
      };
      auto ours = [&] { t_strata.push_back(time([&] { c.allreduce(std::span(x), strata::ReduceOp::Sum); })); };
      if (it % 2) raw_new(), ours(); else ours(), raw_new();  // alternate who goes first
      t_ring.push_back(time([&] { ring.run(); }));
      t_hd.push_back(time([&] { hd.run(); }));
    }
    const double f = 2 * (n - 1) / n, gb = static_cast<double>(bytes) / 1e9;
    const double bw_new = gb / median(t_new) * f, bw_ring = gb / median(t_ring) * f, bw_hd = gb / median(t_hd) * f;
    const double bw_strata = gb / median(t_strata) * f;
    const double best = std::max({bw_new, bw_ring, bw_hd});
    if (c.rank() == 0)
      std::printf("{\"bench\":\"collective\",\"op\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,\"raw_allreduce_busbw_gbs\":%.3f,"
                  "\"raw_ring_chunked_busbw_gbs\":%.3f,\"raw_halving_doubling_busbw_gbs\":%.3f,\"strata_busbw_gbs\":%.3f,"
                  "\"strata_ms\":%.3f,\"ratio_vs_best_raw\":%.3f}\n",
                  c.size(), bytes, bw_new, bw_ring, bw_hd, bw_strata, median(t_strata) * 1e3, bw_strata / best);
    std::fflush(stdout);
  }
}

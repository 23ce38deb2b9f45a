// Collective bandwidth, nccl-tests definitions (PERF.md): for each size, the median over
// iterations of the slowest rank's time, algbw = bytes / time, busbw = algbw * 2(n-1)/n for
// allreduce, * 1 for broadcast, * (n-1)/n for allgather (bytes = the gathered output).
// Prints one JSON line per (collective, size). Policies: in_process (threads).
//
//   bench_collectives [--ranks 2] [--min-bytes 4096] [--max-bytes 268435456] [--iters N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/in_process.hpp>

namespace {

using Clock = std::chrono::steady_clock;

template <class Comm, class Op>
double median_seconds(Comm& c, int iters, Op&& op) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    c.barrier();
    const auto t0 = Clock::now();
    op();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::span<double> one(&s, 1);
    c.allreduce(one, strata::ReduceOp::Max);  // the slowest rank's time
    t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, iters_arg = 0;
  std::size_t min_bytes = 4096, max_bytes = std::size_t{256} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (a == "--min-bytes") min_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--iters") iters_arg = std::atoi(argv[i + 1]);
  }
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const int iters = iters_arg > 0 ? iters_arg : (bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 20 : 7);
    double t_ar = 0, t_bc = 0, t_ag = 0;
    strata::collective::InProcess::launch(ranks, [&](strata::collective::InProcess& c) {
      std::vector<float> x(count, 1.0f), gathered(count);
      const std::size_t share = count / static_cast<std::size_t>(ranks);
      std::vector<float> mine(share, 2.0f);
      const double ar = median_seconds(c, iters, [&] { c.allreduce(std::span(x), strata::ReduceOp::Sum); });
      const double bc = median_seconds(c, iters, [&] { c.broadcast(std::span(x), 0); });
      const double ag = median_seconds(c, iters, [&] {
        c.allgather(std::span<const float>(mine), std::span(gathered.data(), share * static_cast<std::size_t>(ranks)));
      });
      if (c.rank() == 0) t_ar = ar, t_bc = bc, t_ag = ag;
    });
    const double n = ranks, gb = static_cast<double>(bytes) / 1e9;
    std::printf("{\"bench\":\"collective\",\"policy\":\"in_process\",\"ranks\":%d,\"bytes\":%zu,"
                "\"allreduce_us\":%.2f,\"allreduce_busbw_gbs\":%.2f,\"broadcast_busbw_gbs\":%.2f,"
                "\"allgather_busbw_gbs\":%.2f}\n",
                ranks, bytes, t_ar * 1e6, gb / t_ar * 2 * (n - 1) / n, gb / t_bc, gb / t_ag * (n - 1) / n);
    std::fflush(stdout);
  }
}

// strata's side of rendezvous_vs_pytorch.py: how long a new Gloo communicator takes to stand
// up over the job's TCP store, its first allreduce included — the cost every membership change
// of an elastic job pays (Horovod's Gloo re-init: horovod#3556). Each round builds a
// communicator under a fresh prefix (handshake on the store already done: the store
// connection is the process's), runs one allreduce of one float and tears it down. Rank 0
// prints one JSON line: the first communicator's time (store connection and handshake
// included) and the median and max of the slowest rank's time per round.
//
//   strata-run -np 4 --rendezvous tcp bench_rendezvous [--rounds 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/gloo.hpp>

int main(int argc, char** argv) {
  int rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--rounds") rounds = std::atoi(argv[i + 1]);
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto t0 = Clock::now();
  strata::collective::Gloo world("world");
  float one = 1.0f;
  world.allreduce(std::span(&one, 1), strata::ReduceOp::Sum);
  double first = ms(t0, Clock::now());
  world.allreduce(std::span(&first, 1), strata::ReduceOp::Max);
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    world.barrier();
    const auto start = Clock::now();
    {
      strata::collective::Gloo c("round" + std::to_string(r));
      float x = 1.0f;
      c.allreduce(std::span(&x, 1), strata::ReduceOp::Sum);
    }
    double t = ms(start, Clock::now());
    world.allreduce(std::span(&t, 1), strata::ReduceOp::Max);
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  if (world.rank() == 0)
    std::printf("{\"impl\":\"strata\",\"nproc\":%d,\"rounds\":%d,\"first_ms\":%.2f,\"median_ms\":%.2f,\"max_ms\":%.2f}\n",
                world.size(), rounds, first, times[times.size() / 2], times.back());
  return 0;
}

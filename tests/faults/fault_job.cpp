// The fault suite's job (tests/faults/suite.py): `steps` rounds of an all-reduce of a
// gradient-sized buffer over one policy, with the fault hook (STRATA_FAULT) live before and
// after each collective. Every rank checks each result against the serial sum, so a fault
// can never pass as silently wrong numbers.
//   fault_job in_process|mpi|gloo [--ranks N] [--steps S] [--count K] [--hold-ms H]
// in_process runs N ranks as threads; mpi and gloo take theirs from mpirun / strata-run.
// Kinds handled here (on top of the hook's own): skip (the rank never calls this collective
// and goes idle), stall (a thread stops, as SIGSTOP stops a process), shape (one more
// element), dtype (int32 instead of float32), op (max instead of sum).
// A rank that sees an error prints "rank R: <message>" and the job exits 1; a rank that
// finishes prints "rank R finished"; then each rank holds for --hold-ms (for the listener check).
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/in_process.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#include "support/fault.hpp"

namespace {

struct Args {
  std::string policy;
  int ranks = 3, steps = 60;
  std::size_t count = 16384;
  int hold_ms = 0;
};

void idle(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// One rank's job; returns its exit status. `stall` stops this rank (a thread cannot
/// SIGSTOP); `park` keeps it running without ever calling a collective again.
template <class C>
int run_rank(C& comm, const Args& a, auto&& stall, auto&& park) {
  const int r = comm.rank(), n = comm.size();
  std::vector<float> x(a.count + 1);
  std::vector<std::int32_t> xi(a.count);
  try {
    for (int step = 0; step < a.steps; ++step) {
      for (std::size_t i = 0; i < a.count; ++i) x[i] = static_cast<float>((r + 1) * (step + 1)) + static_cast<float>(i % 7);
      const std::string kind =
          strata::testing::fault_point(r, step, "before_collective", {"skip", "stall", "shape", "dtype", "op"});
      if (kind == "skip") {  // goes elsewhere: never calls this collective or any later one
        if constexpr (requires { comm.sequence(); })  // what the flight recorder's diagnosis must name
          std::printf("rank %d skips allreduce #%llu\n", r, static_cast<unsigned long long>(comm.sequence()));
        std::fflush(stdout);
        park();
        return 0;
      }
      if (kind == "stall") stall();
      if (kind == "dtype")
        comm.allreduce(std::span(xi), strata::ReduceOp::Sum);
      else
        comm.allreduce(std::span(x.data(), a.count + (kind == "shape")), kind == "op" ? strata::ReduceOp::Max : strata::ReduceOp::Sum);
      for (std::size_t i = 0; i < a.count; ++i) {
        const double want = static_cast<double>(n * (n + 1) / 2 * (step + 1)) + static_cast<double>(n) * static_cast<double>(i % 7);
        if (static_cast<double>(x[i]) != want) {
          std::printf("rank %d: WRONG RESULT at step %d, element %zu: %g, expected %g\n", r, step, i,
                      static_cast<double>(x[i]), want);
          std::fflush(stdout);
          return 3;
        }
      }
      strata::testing::fault_point(r, step, "after_collective");
    }
  } catch (const strata::collective_error& e) {  // the collective has told the others
    std::printf("rank %d: %s\n", r, e.what());
    std::fflush(stdout);
    return 1;
  } catch (const std::exception& e) {  // this rank alone: abort the group, as the strategies do
    std::printf("rank %d: %s\n", r, e.what());
    std::fflush(stdout);
    comm.abort("rank " + std::to_string(r) + " failed: " + e.what());
    return 1;
  }
  std::printf("rank %d finished\n", r);
  std::fflush(stdout);
  idle(a.hold_ms);
  return 0;
}

/// Ranks as threads. A thread that stalls never returns; the process ends once the others have.
int run_in_process(const Args& a) {
  auto comms = strata::collective::InProcess::make_group(a.ranks);
  std::atomic<int> done{0}, parked{0}, status{0};
  auto park_forever = [&] {
    parked.fetch_add(1);
    for (;;) idle(1000);
  };
  for (int r = 0; r < a.ranks; ++r)
    std::thread([&, r] {
      auto& c = comms[static_cast<std::size_t>(r)];
      const int rc = run_rank(c, a, park_forever, park_forever);
      if (rc != 0) c.abort("rank " + std::to_string(r) + " failed");  // the others fail fast
      int expect = 0;
      status.compare_exchange_strong(expect, rc);
      done.fetch_add(1);
    }).detach();
  // Every rank that runs on reports within its deadline; a stalled or skipping one is left behind.
  while (done.load() + parked.load() < a.ranks) idle(5);
  std::fflush(stdout);
  std::_Exit(status.load());
}

int usage() {
  std::printf("usage: fault_job in_process|mpi|gloo [--ranks N] [--steps S] [--count K] [--hold-ms H]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) return usage();
  a.policy = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--ranks") a.ranks = static_cast<int>(v);
    else if (flag == "--steps") a.steps = static_cast<int>(v);
    else if (flag == "--count") a.count = static_cast<std::size_t>(v);
    else if (flag == "--hold-ms") a.hold_ms = static_cast<int>(v);
    else return usage();
  }
  try {
    if (a.policy == "in_process") return run_in_process(a);
#if STRATA_HAS_MPI
    if (a.policy == "mpi") {
      strata::collective::Mpi c(MPI_COMM_WORLD, strata::collective::Options::from_env());
      return run_rank(c, a, [] { std::raise(SIGSTOP); }, [] { idle(30'000); });
    }
#endif
#if STRATA_HAS_GLOO
    if (a.policy == "gloo") {
      strata::collective::Gloo c("world", strata::collective::Options::from_env());
      return run_rank(c, a, [] { std::raise(SIGSTOP); }, [] { idle(30'000); });
    }
#endif
  } catch (const std::exception& e) {  // set-up: rendezvous, bad environment
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return usage();
}

// What the flight recorder adds to one collective: the time of a start() and finish() pair
// (collective/flight_recorder.hpp) on this thread, over many calls, against an empty loop.
// Prints one JSON line; bench/results/flight_recorder.md divides it by a step's collectives.
//   bench_flight_recorder [--calls N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <strata/collective/flight_recorder.hpp>

int main(int argc, char** argv) {
  long calls = 10'000'000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atol(argv[i + 1]);
  strata::collective::FlightRecorder recorder(strata::collective::FlightRecorder::kDefaultEntries);
  const int group = recorder.group("bench", 0, 1);
  strata::collective::Fingerprint fp{strata::collective::OpKind::allreduce, strata::ReduceOp::Sum,
                                     strata::DType::f32, 262144, 0, 0};
  const strata::collective::FlightRecorder::Label label("bucket", 3);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (long i = 0; i < calls; ++i) {
    fp.seq = static_cast<std::uint64_t>(i);
    recorder.finish(recorder.start(group, fp));
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(calls);
  std::printf("{\"bench\": \"flight_recorder\", \"calls\": %ld, \"ns_per_collective\": %.1f, \"entries\": %zu}\n", calls,
              ns, recorder.capacity());
  return 0;
}

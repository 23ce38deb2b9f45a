// write_job_timeline across processes (mpirun: Mpi; strata-run: Gloo), as on several hosts
// whose clocks disagree: each rank's clock is made to read 7 s per rank ahead of the steady
// clock (rank r: +7r s), both in the spans it records and in the clock the offset is
// estimated from. Against that known truth:
//   1. chief_clock_offset gives every rank -7r s, within 20 ms;
//   2. the chief's trace holds every rank's events (no other rank writes a file), and one
//      span each rank recorded right after a barrier lands within 20 ms of the others' once
//      moved onto the chief's clock (7 s and more apart before);
//   3. the trace is one JSON object: a traceEvents array with no trailing comma.
//   job_timeline mpi|gloo DIR        exit status 0: every check held on this rank
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <strata/strata.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

namespace {

constexpr std::int64_t kSkewPerRank = 7'000'000'000;  // ns
constexpr double kToleranceNs = 20e6;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

template <class C>
int run(const std::string& dir) {
  strata::MultiWorkerMirroredStrategy<C> strategy;
  const int rank = strategy.rank(), n = strategy.num_replicas_in_sync();
  const std::int64_t skew = kSkewPerRank * rank;
  auto skewed_now = [skew]() noexcept { return strata::detail::steady_now_ns() + skew; };

  // 1. The offset against the known skew.
  const std::int64_t offset = strata::chief_clock_offset(strategy, 15, skewed_now);
  expect(std::fabs(static_cast<double>(offset + skew)) < kToleranceNs,
         "rank " + std::to_string(rank) + ": offset " + std::to_string(offset) + " ns, expected about " +
             std::to_string(-skew));

  // 2. A span recorded right after a barrier, on the skewed clock.
  auto& timeline = strata::observe::Timeline::instance();
  timeline.start(rank);
  strategy.reduce(strata::ReduceOp::Sum, strategy.run([](strata::ReplicaContext&) { return 0.0; }));
  const auto at = strata::observe::Timeline::Clock::time_point(std::chrono::nanoseconds(skewed_now()));
  timeline.record("mark", "test", at, at + std::chrono::microseconds(10), rank);
  const std::string path = dir + "/trace.json";
  if (strategy.is_chief()) {
    std::filesystem::create_directories(dir);
    std::filesystem::remove(path);
  }
  strata::write_job_timeline(strategy, path, skewed_now);
  strategy.reduce(strata::ReduceOp::Sum, strategy.run([](strata::ReplicaContext&) { return 0.0; }));
  if (!strategy.is_chief()) {
    std::printf("rank %d: offset %lld ns (true %lld)\n", rank, static_cast<long long>(offset),
                static_cast<long long>(-skew));
    return failures;
  }

  std::ifstream in(path);
  expect(in.good(), "the chief wrote no " + path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  expect(text.rfind("{\"traceEvents\":[\n", 0) == 0, "the trace does not start with the traceEvents array");
  expect(text.size() > 4 && text.substr(text.size() - 4) == "\n]}\n", "the trace does not end the array");
  expect(text.find(",\n]") == std::string::npos, "a trailing comma before the end of the array");
  std::vector<double> marks(static_cast<std::size_t>(n), NAN);
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    if (l.find("\"name\":\"mark\"") == std::string::npos) continue;
    const auto pid = l.find("\"pid\":"), ts = l.find("\"ts\":");
    const int r = std::atoi(l.c_str() + pid + 6);
    if (r >= 0 && r < n) marks[static_cast<std::size_t>(r)] = std::atof(l.c_str() + ts + 5) * 1e3;  // µs -> ns
  }
  for (int r = 0; r < n; ++r) {
    expect(!std::isnan(marks[static_cast<std::size_t>(r)]), "no span of rank " + std::to_string(r) + " in the trace");
    expect(std::fabs(marks[static_cast<std::size_t>(r)] - marks[0]) < kToleranceNs,
           "rank " + std::to_string(r) + "'s span is " + std::to_string((marks[static_cast<std::size_t>(r)] - marks[0]) / 1e6) +
               " ms from rank 0's on the chief's clock");
    expect(!std::filesystem::exists(path + ".rank" + std::to_string(r)), "a per-rank file was left");
  }
  std::printf("rank 0: %d ranks' spans within %.3f ms of each other in %s\n", n,
              [&] {
                double worst = 0;
                for (double m : marks) worst = std::max(worst, std::fabs(m - marks[0]) / 1e6);
                return worst;
              }(),
              path.c_str());
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: job_timeline mpi|gloo DIR\n");
    return 2;
  }
  const std::string which = argv[1], dir = argv[2];
  try {
#if STRATA_HAS_MPI
    if (which == "mpi") return run<strata::collective::Mpi>(dir) == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return run<strata::collective::Gloo>(dir) == 0 ? 0 : 1;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "job_timeline: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);  // without finalising: the launcher then stops the other ranks at once
  }
  std::fprintf(stderr, "job_timeline: '%s' is not built here\n", which.c_str());
  return 2;
}

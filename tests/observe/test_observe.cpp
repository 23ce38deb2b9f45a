// The timeline records spans per thread and writes Chrome trace JSON that merges across
// ranks; the metrics CSV keeps every N-th step and leaves unmeasured fields empty.
#include "doctest.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

#include <strata/observe/metrics.hpp>
#include <strata/observe/timeline.hpp>

namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("Observe.Timeline.RecordsSpansPerThreadAndMerges") {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_timeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto& t = strata::observe::Timeline::instance();
  { strata::observe::ScopedEvent off("before start", "test"); }  // off: not recorded
  t.start(3);
  std::thread worker([&] {
    t.name_thread("worker");
    strata::observe::ScopedEvent ev("allreduce", "communication", 7, 4096);
  });
  worker.join();
  {
    strata::observe::ScopedEvent ev("forward", "compute");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  t.write((dir / "a.json").string());
  const std::string a = slurp(dir / "a.json");
  CHECK(a.rfind("{\"traceEvents\":[", 0) == 0);
  CHECK(count(a, "\"name\":\"before start\"") == 0);
  CHECK(count(a, "\"name\":\"forward\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":3") == 1);
  CHECK(count(a, "\"args\":{\"index\":7,\"bytes\":4096}") == 1);
  CHECK(count(a, "\"args\":{\"name\":\"worker\"}") == 1);
  CHECK(count(a, "\"args\":{\"name\":\"rank 3\"}") == 1);
  // The forward span lasted at least the 2 ms sleep: "dur" is in microseconds.
  const auto at = a.find("\"dur\":", a.find("\"name\":\"forward\""));
  CHECK(std::stod(a.substr(at + 6)) >= 2000.0);
  // Two ranks' files merge into one trace holding both.
  std::filesystem::copy_file(dir / "a.json", dir / "b.json");
  strata::observe::Timeline::merge({(dir / "a.json").string(), (dir / "b.json").string()}, (dir / "m.json").string());
  const std::string m = slurp(dir / "m.json");
  CHECK(count(m, "\"ph\":\"X\"") == 2 * count(a, "\"ph\":\"X\""));
  CHECK(count(m, "{\"traceEvents\"") == 1);
  CHECK(m.substr(m.size() - 4) == "\n]}\n");
  CHECK_THROWS_AS(strata::observe::Timeline::merge({(dir / "missing.json").string()}, (dir / "x.json").string()),
                  strata::invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Observe.MetricsCsv.EveryNthStepAndEmptyFields") {
  const auto path = std::filesystem::temp_directory_path() / ("strata_metrics_" + std::to_string(::getpid()) + ".csv");
  {
    strata::observe::MetricsCsv csv(path.string(), 2);
    for (int s = 1; s <= 5; ++s)  // a straggler window closes at step 4
      csv.step({.step = s, .epoch = 1, .loss = 1.0 / s, .examples_per_s = 100.0 * s,
                .slowest_rank = s == 4 ? 2.0 : NAN, .slowest_vs_others = s == 4 ? 1.75 : NAN});
    csv.evaluation(5, 1, 0.8125);
    csv.flush();
  }
  const std::string text = slurp(path);
  std::istringstream lines(text);
  std::string header, l2, l4, ev, extra;
  std::getline(lines, header);
  std::getline(lines, l2);
  std::getline(lines, l4);
  std::getline(lines, ev);
  CHECK(header == "step,epoch,loss,examples_per_s,data_ms,forward_ms,backward_ms,apply_ms,allreduce_ms,"
                  "allreduce_exposed_ms,compute_ms,slowest_rank,slowest_vs_others,test_accuracy");
  CHECK(l2 == "2,1,0.5,200,,,,,,,,,,");
  CHECK(l4 == "4,1,0.25,400,,,,,,,,2,1.75,");
  CHECK(ev == "5,1,,,,,,,,,,,,0.812500");
  CHECK_FALSE(std::getline(lines, extra));
  CHECK_THROWS_AS(strata::observe::MetricsCsv("/nonexistent/dir/m.csv"), strata::invalid_argument);
  CHECK_THROWS_AS(strata::observe::MetricsCsv(path.string(), 0), strata::invalid_argument);
  std::filesystem::remove(path);
}

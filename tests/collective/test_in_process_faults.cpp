// No silent hangs on the in-process policy: a missing rank times out with its name, a
// failing rank aborts the rest at once, and mismatched calls are reported in debug mode.
#include "doctest.hpp"

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/in_process.hpp>

using strata::ReduceOp;
using strata::collective::InProcess;
using Clock = std::chrono::steady_clock;

namespace {
strata::collective::Options quick(int ms, bool debug = false) {
  strata::collective::Options o;
  o.timeout = std::chrono::milliseconds(ms);
  o.check_fingerprints = debug;
  return o;
}
}  // namespace

TEST_CASE("Collective.InProcess.MissingRankTimesOutByName" * doctest::timeout(30)) {
  const auto t0 = Clock::now();
  std::vector<std::string> messages(3);
  InProcess::launch(3, [&](InProcess& c) {
    if (c.rank() == 1) return;  // never joins
    std::vector<float> x(10, 1.0f);
    try {
      c.allreduce(std::span(x), ReduceOp::Sum);
    } catch (const strata::error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  }, quick(300));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(secs < 5.0);
  for (int r : {0, 2}) {
    INFO(messages[static_cast<std::size_t>(r)]);
    // Either this rank's own deadline passed, or the other's timeout aborted it first.
    CHECK(messages[static_cast<std::size_t>(r)].find("allreduce #0") != std::string::npos);
    CHECK(messages[static_cast<std::size_t>(r)].find("rank 1 has not arrived") != std::string::npos);
  }
}

TEST_CASE("Collective.InProcess.FailingRankAbortsTheOthers" * doctest::timeout(30)) {
  const auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(InProcess::launch(4, [](InProcess& c) {
    std::vector<float> x(100, 1.0f);
    c.allreduce(std::span(x), ReduceOp::Sum);
    if (c.rank() == 2) throw std::runtime_error("injected failure on rank 2");
    c.allreduce(std::span(x), ReduceOp::Sum);  // the others wait for rank 2 here
  }, quick(60'000)), "injected failure on rank 2", std::runtime_error);
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 5.0);  // not the 60 s deadline
}

TEST_CASE("Collective.InProcess.AbortReachesWaitingRanks" * doctest::timeout(30)) {
  std::vector<std::string> messages(2);
  InProcess::launch(2, [&](InProcess& c) {
    std::vector<float> x(4, 1.0f);
    try {
      if (c.rank() == 0) c.abort("operator pressed stop");
      c.allreduce(std::span(x), ReduceOp::Sum);
    } catch (const strata::collective_error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  }, quick(60'000));
  for (const auto& m : messages) CHECK(m.find("operator pressed stop") != std::string::npos);
}

TEST_CASE("Collective.InProcess.DebugModeNamesMismatchedCalls" * doctest::timeout(30)) {
  std::vector<std::string> messages(2);
  InProcess::launch(2, [&](InProcess& c) {
    std::vector<float> x(c.rank() == 0 ? 4 : 5, 1.0f);
    try {
      c.allreduce(std::span(x), ReduceOp::Sum);
    } catch (const strata::collective_error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  }, quick(10'000, true));
  for (const auto& m : messages) {
    INFO(m);
    CHECK(m.find("float32 x 4") != std::string::npos);
    CHECK(m.find("float32 x 5") != std::string::npos);
  }
}

TEST_CASE("Collective.InProcess.MismatchNamesEachRanksCallSite" * doctest::timeout(30)) {
  // Rank 1 broadcasts where rank 0 all-reduces: the message names each call's file and line.
  std::vector<std::string> messages(2);
  int reduce_line = 0, broadcast_line = 0;
  InProcess::launch(2, [&](InProcess& c) {
    std::vector<float> x(4, 1.0f);
    try {
      if (c.rank() == 0) {
        reduce_line = __LINE__ + 1;
        c.allreduce(std::span(x), ReduceOp::Sum);
      } else {
        broadcast_line = __LINE__ + 1;
        c.broadcast(std::span(x), 0);
      }
    } catch (const strata::collective_error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  }, quick(10'000));
  const std::string at0 = "test_in_process_faults.cpp:" + std::to_string(reduce_line);
  const std::string at1 = "test_in_process_faults.cpp:" + std::to_string(broadcast_line);
  for (const auto& m : messages) {
    INFO(m);
    CHECK(m.find("rank 0 called allreduce #0 (op sum, float32 x 4) at " + at0) != std::string::npos);
    CHECK(m.find("rank 1 called broadcast #0 (root 0, float32 x 4) at " + at1) != std::string::npos);
    CHECK(m.find("call sites: rank 0 " + at0 + ", rank 1 " + at1) != std::string::npos);
  }
  // An outer call site (a strategy's, a gradient bucket's label) is kept by the calls inside it.
  {
    const strata::collective::FlightRecorder::Label bucket("bucket", 3);
    const strata::collective::FlightRecorder::CallSite inner;
    CHECK(std::string(strata::collective::FlightRecorder::current_label()) == "bucket 3");
  }
  CHECK(std::string(strata::collective::FlightRecorder::current_label()).empty());
  {  // a long file name gives up its start, never the line
    const strata::collective::FlightRecorder::CallSite site(
        strata::SourceSite{"/src/project/a_rather_long_directory/some_very_long_file_name_of_a_test.cpp", 12345});
    const std::string label = strata::collective::FlightRecorder::current_label();
    CHECK(label == "g_file_name_of_a_test.cpp:12345");
    CHECK(label.size() == strata::collective::FlightRecorder::kLabelBytes - 1);
  }
}

TEST_CASE("Collective.InProcess.BadArgumentsAreNamed") {
  auto comms = InProcess::make_group(1);
  std::vector<float> a(3), b(4);
  CHECK_THROWS_AS(comms[0].allreduce(std::span<const float>(a), std::span(b), ReduceOp::Sum), strata::invalid_argument);
  CHECK_THROWS_AS(comms[0].broadcast(std::span(a), 1), strata::invalid_argument);
  CHECK_THROWS_AS(InProcess::make_group(0), strata::invalid_argument);
}

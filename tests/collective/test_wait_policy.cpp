// The wait policy of barriers (wait_policy.hpp): who may spin long, the bounded spin, the
// back-off after a long spin runs out, and in-process all-reduces whose late rank arrives
// within the spin and past it.
#include "doctest.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include <strata/collective/async.hpp>
#include <strata/collective/detail/wait_policy.hpp>
#include <strata/collective/in_process.hpp>

namespace wait_detail = strata::collective::detail;
using Clock = std::chrono::steady_clock;

TEST_CASE("Collective.WaitPolicy.OnlyAReplicaThreadWithACoreEachSpinsLong") {
  const unsigned cores = std::thread::hardware_concurrency();
  REQUIRE(cores > 0);
  const bool on = wait_detail::long_spin_budget().count() > 0;  // STRATA_SPIN_US=0 turns it off
  CHECK(wait_detail::may_spin_long(1) == on);
  CHECK(wait_detail::may_spin_long(static_cast<int>(cores)) == on);
  CHECK_FALSE(wait_detail::may_spin_long(static_cast<int>(cores) + 1));  // more ranks than cores
  CHECK_FALSE(wait_detail::may_spin_long(0));
  // A communication thread (AsyncWorker) never spins long: its rank computes on the same core.
  bool on_worker = true;
  wait_detail::AsyncWorker worker;
  worker.enqueue([&] { on_worker = wait_detail::may_spin_long(1); });
  worker.drain();
  CHECK_FALSE(on_worker);
  CHECK(wait_detail::may_spin_long(1) == on);  // the flag is the worker thread's own
}

TEST_CASE("Collective.WaitPolicy.BudgetIsTwoMillisecondsUnlessSet") {
  if (std::getenv("STRATA_SPIN_US") == nullptr)
    CHECK(wait_detail::long_spin_budget() == wait_detail::kLongSpin);
  else
    CHECK(wait_detail::long_spin_budget().count() == std::atol(std::getenv("STRATA_SPIN_US")));
  CHECK(wait_detail::kLongSpin == std::chrono::microseconds(2000));
}

TEST_CASE("Collective.WaitPolicy.SpinForEndsWhenReadyOrAfterItsBudget") {
  std::atomic<bool> flag{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    flag.store(true);
  });
  CHECK(wait_detail::spin_for(std::chrono::seconds(5), [&] { return flag.load(); }));
  setter.join();
  const auto t0 = Clock::now();
  CHECK_FALSE(wait_detail::spin_for(std::chrono::microseconds(3000), [] { return false; }));
  CHECK(Clock::now() - t0 >= std::chrono::microseconds(3000));
}

TEST_CASE("Collective.WaitPolicy.BackoffAfterALongSpinRunsOut") {
  wait_detail::SpinBackoff b;
  auto brief_waits = [&] {  // long_now() false this many times in a row, then true
    int n = 0;
    while (!b.long_now()) ++n;
    return n;
  };
  CHECK(brief_waits() == 0);
  b.ran_out();
  CHECK(b.brief_left() == wait_detail::SpinBackoff::kFirst);
  CHECK(brief_waits() == static_cast<int>(wait_detail::SpinBackoff::kFirst));
  b.ran_out();  // the long spin tried after them ran out too: twice as many
  CHECK(brief_waits() == static_cast<int>(2 * wait_detail::SpinBackoff::kFirst));
  for (int i = 0; i < 12; ++i) b.ran_out();  // doubling stops at kMost
  CHECK(b.brief_left() == wait_detail::SpinBackoff::kMost);
  CHECK(brief_waits() == static_cast<int>(wait_detail::SpinBackoff::kMost));
  b.paid();  // a long spin that ended in time: the next run-out backs off kFirst again
  b.ran_out();
  CHECK(b.brief_left() == wait_detail::SpinBackoff::kFirst);
}

TEST_CASE("Collective.WaitPolicy.SpinWaitSpinsBrieflyAfterItsLongSpinRanOut") {
  if (!wait_detail::may_spin_long(1)) return;  // STRATA_SPIN_US=0: no long spin to run out
  std::thread([] {  // a fresh thread: its own SpinBackoff
    long calls = 0;
    auto never = [&] {
      ++calls;
      return false;
    };
    const auto t0 = Clock::now();
    CHECK_FALSE(wait_detail::spin_wait(1, 10, never));  // long: runs the whole budget out
    CHECK(Clock::now() - t0 >= wait_detail::long_spin_budget());
    CHECK(wait_detail::spin_backoff().brief_left() == wait_detail::SpinBackoff::kFirst);
    calls = 0;
    CHECK_FALSE(wait_detail::spin_wait(1, 10, never));  // brief: 10 turns, and one last look
    CHECK(calls == 11);
    CHECK(wait_detail::spin_backoff().brief_left() == wait_detail::SpinBackoff::kFirst - 1);
    std::atomic<bool> flag{true};
    CHECK(wait_detail::spin_wait(1, 10, [&] { return flag.load(); }));  // ready at once: still counted as brief
    CHECK(wait_detail::spin_backoff().brief_left() == wait_detail::SpinBackoff::kFirst - 2);
  }).join();
}

TEST_CASE("Collective.WaitPolicy.LateRankWithinAndPastTheSpin" * doctest::timeout(60)) {
  // Rank 1 arrives 0.3 ms late (within a long spin) or 20 ms late (past it: the others sleep),
  // with 2 ranks (a core each on most machines) and 5 (more ranks than cores here).
  for (int n : {2, 5})
    for (int late_us : {300, 20000}) {
      CAPTURE(n);
      CAPTURE(late_us);
      std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
      strata::collective::InProcess::launch(n, [&](strata::collective::InProcess& c) {
        std::vector<float> x(1000);
        for (int step = 0; step < 3; ++step) {
          for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((c.rank() + 1) * (step + 1)) + 0.5f * static_cast<float>(i);
          if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::microseconds(late_us));
          c.allreduce(std::span(x), strata::ReduceOp::Sum);
        }
        got[static_cast<std::size_t>(c.rank())] = x;
      });
      const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < 1000; i += 111)
          REQUIRE(got[static_cast<std::size_t>(r)][i] == doctest::Approx(3.0f * ranks_sum + 0.5f * static_cast<float>(n * i)));
    }
}

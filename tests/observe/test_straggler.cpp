// Straggler scores: the scoring of a window against a hand computation, the busy time a step
// (its wall time less its waits on other ranks) against sleeps of known length, and the
// scores' window under the strategies of one process (the multi-process ones: the fault
// suite's "B1 rank slowed" and "B2 healthy job" scenarios, tests/faults/suite.py).
#include "doctest.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include <strata/strata.hpp>

namespace {

void sleep_ms_for_straggler(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// A step of `busy_ms` of this thread's own time and `wait_ms` spent as a wait on other ranks.
void straggler_step(int busy_ms, int wait_ms) {
  sleep_ms_for_straggler(busy_ms);
  const strata::collective::detail::WaitTimer waiting;
  sleep_ms_for_straggler(wait_ms);
}

/// Runs `steps` steps of 12 ms busy and 20 ms waiting under `s` with windows of `every`;
/// returns how many reports came back, each checked.
template <class S>
int straggler_windows(S& s, int steps, int every) {
  strata::StragglerScores scores({.every = every});
  int reports = 0;
  for (int k = 1; k <= steps; ++k) {
    s.run([](strata::ReplicaContext&) { straggler_step(12, 20); return 0.0; });
    const strata::observe::StragglerReport* r = scores.step(s);
    CHECK(scores.last_busy_ms() >= 11.0);
    CHECK(scores.last_busy_ms() < 31.0);  // the 20 ms of waiting left out (a loaded host adds some)
    CHECK((r != nullptr) == (k % every == 0));
    if (!r) continue;
    ++reports;
    REQUIRE(r->busy_ms.size() == 1);  // one process: one row, whatever its replicas
    CHECK(r->step == k);
    CHECK(r->slowest == 0);
    CHECK(r->vs_fastest[0] == 1.0);
    CHECK_FALSE(r->markedly_slow);  // with one rank, never
    CHECK(r->sentence().empty());
  }
  return reports;
}

}  // namespace

TEST_CASE("Observe.Straggler.ScoresAgainstTheFastestAndTheOthersMedian") {
  const auto r = strata::observe::score_ranks(40, {10.0, 11.0, 30.0, 10.5}, {9.0, 11.0, 10.0, 10.5}, 1.5);
  CHECK(r.step == 40);
  CHECK(r.slowest == 2);
  CHECK(r.vs_fastest[0] == 1.0);
  CHECK(r.vs_fastest[2] == doctest::Approx(3.0));
  CHECK(r.vs_own_best[0] == doctest::Approx(10.0 / 9.0));
  CHECK(r.vs_own_best[2] == doctest::Approx(3.0));
  CHECK(r.slowest_vs_others == doctest::Approx(30.0 / 10.5));  // the median of 10, 10.5 and 11
  CHECK(r.markedly_slow);
  CHECK(r.sentence() == "slowest: rank 2, 2.9x the others' median (30.0 ms a step against 10.5)");

  const auto healthy = strata::observe::score_ranks(40, {10.0, 11.0, 12.0}, {10.0, 11.0, 12.0}, 1.5);
  CHECK(healthy.slowest == 2);
  CHECK(healthy.slowest_vs_others == doctest::Approx(12.0 / 10.5));  // the others' median of two: their mean
  CHECK_FALSE(healthy.markedly_slow);
  CHECK(healthy.sentence().empty());

  const auto two = strata::observe::score_ranks(10, {4.0, 9.0}, {4.0, 9.0}, 2.0);
  CHECK(two.slowest_vs_others == doctest::Approx(2.25));  // against the one other rank
  CHECK(two.markedly_slow);

  const auto alone = strata::observe::score_ranks(10, {50.0}, {5.0}, 1.5);
  CHECK_FALSE(alone.markedly_slow);
  CHECK(std::isnan(alone.slowest_vs_others));
  CHECK(alone.vs_own_best[0] == doctest::Approx(10.0));

  const auto idle = strata::observe::score_ranks(10, {0.0, 0.0}, {0.0, 0.0}, 1.5);  // nothing measured: no blame
  CHECK(idle.vs_fastest[1] == 1.0);
  CHECK_FALSE(idle.markedly_slow);

  CHECK(strata::observe::median_of({3.0, 1.0, 2.0}) == 2.0);
  CHECK(strata::observe::median_of({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(std::isnan(strata::observe::median_of({})));
  CHECK_THROWS_WITH_AS(strata::observe::score_ranks(1, {1.0}, {1.0}, 1.0), doctest::Contains("threshold must be above 1"),
                       strata::invalid_argument);
  CHECK_THROWS_AS(strata::observe::score_ranks(1, {1.0, 2.0}, {1.0}, 1.5), strata::invalid_argument);
}

TEST_CASE("Observe.Straggler.WaitsCountOnceAndNotOnBackgroundThreads") {
  using strata::collective::detail::thread_wait_seconds;
  using strata::collective::detail::WaitTimer;
  const double before = thread_wait_seconds();
  {
    const WaitTimer outer;
    sleep_ms_for_straggler(10);
    const WaitTimer inner;  // a collective inside a wait: still one wait
    sleep_ms_for_straggler(10);
  }
  const double waited = thread_wait_seconds() - before;
  CHECK(waited >= 0.019);
  CHECK(waited < 0.035);  // 0.04 or more if the inner timer counted too

  double background = -1;
  std::thread([&] {
    strata::collective::detail::on_background_thread = true;
    {
      const WaitTimer t;
      sleep_ms_for_straggler(5);
    }
    background = thread_wait_seconds();
  }).join();
  CHECK(background == 0.0);
}

TEST_CASE("Strategy.StragglerScores.BusyTimeUnderEveryStrategyOfOneProcess") {
  SUBCASE("OneDevice") {
    strata::OneDeviceStrategy s;
    CHECK(straggler_windows(s, 6, 3) == 2);
  }
  SUBCASE("Mirrored, 3 replicas") {
    strata::MirroredStrategy s(3);
    CHECK(straggler_windows(s, 4, 2) == 2);
  }
  SUBCASE("CentralStorage, 2 replicas") {
    strata::CentralStorageStrategy s(2);
    CHECK(straggler_windows(s, 3, 3) == 1);
  }
}

TEST_CASE("Strategy.StragglerScores.OffAndBadOptions") {
  strata::OneDeviceStrategy s;
  strata::StragglerScores off({.every = 0});
  CHECK_FALSE(off.on());
  CHECK(off.step(s) == nullptr);
  CHECK_FALSE(off.last_report().has_value());
  CHECK_THROWS_WITH_AS(strata::StragglerScores({.every = -1}), doctest::Contains("every must be 0"), strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::StragglerScores({.every = 5, .threshold = 0.9}), doctest::Contains("threshold must be above 1"),
                       strata::invalid_argument);
}

// ps::Dispatcher, an Async epoch's batches handed out by the first server: each batch goes to
// one worker at a time; a lost worker's held batches go to the others; a request waits while a
// live worker still holds a batch and is answered "none" once none does; every batch is
// completed exactly once whatever the order of requests and losses (checked against a serial
// count over thousands of drawn schedules).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/support/error.hpp>

#include "doctest.hpp"

using strata::ps::Dispatcher;

namespace {
// The batches `answers` give to worker w, in order.
std::vector<std::int64_t> to(const std::vector<Dispatcher::Answer>& answers, int w) {
  std::vector<std::int64_t> out;
  for (const auto& a : answers)
    if (a.worker == w) out.push_back(a.batch);
  return out;
}
}  // namespace

TEST_CASE("Dispatcher.HandsOutInOrderAndEndsWhenNoneIsHeld") {
  Dispatcher d(3, {0, 0});
  CHECK(to(d.request(0, Dispatcher::kNone), 0) == std::vector<std::int64_t>{0});
  CHECK(to(d.request(0, Dispatcher::kNone), 0) == std::vector<std::int64_t>{1});
  CHECK(to(d.request(1, Dispatcher::kNone), 1) == std::vector<std::int64_t>{2});
  // Nothing left to hand out, and batches are held: worker 1's second request waits.
  CHECK(d.request(1, Dispatcher::kNone).empty());
  CHECK(d.request(0, 0).empty());  // worker 0 finished batch 0; it still holds 1, worker 1 holds 2
  CHECK(d.request(0, 1).empty());
  // The last held batch finished: every waiting request is answered "none".
  const auto last = d.request(1, 2);
  CHECK(to(last, 0) == std::vector<std::int64_t>{Dispatcher::kNone, Dispatcher::kNone});
  CHECK(to(last, 1) == std::vector<std::int64_t>{Dispatcher::kNone, Dispatcher::kNone});
  CHECK(d.complete());
  CHECK(d.completed() == 3);
  CHECK(d.repeated() == 0);
  CHECK(d.redispatched() == 0);
}

TEST_CASE("Dispatcher.ALostWorkersBatchesGoToTheOthers") {
  Dispatcher d(4, {0, 0, 0});
  (void)d.request(0, Dispatcher::kNone);  // 0
  (void)d.request(1, Dispatcher::kNone);  // 1
  (void)d.request(1, Dispatcher::kNone);  // 2
  (void)d.request(2, Dispatcher::kNone);  // 3
  CHECK(d.request(0, 0).empty());        // worker 0 waits: 1, 2, 3 are held
  // Worker 1 is lost holding 1 and 2: the waiting worker 0 gets 1 at once, 2 is queued.
  CHECK(to(d.lost(1), 0) == std::vector<std::int64_t>{1});
  CHECK(to(d.request(2, 3), 2) == std::vector<std::int64_t>{2});
  CHECK(d.redispatched() == 2);
  CHECK(d.request(0, 1).empty());  // worker 2 still holds 2
  const auto last = d.request(2, 2);
  CHECK(to(last, 0) == std::vector<std::int64_t>{Dispatcher::kNone});
  CHECK(to(last, 2) == std::vector<std::int64_t>{Dispatcher::kNone});
  CHECK(d.complete());
  // A lost worker's requests are not answered, and a report of a batch it was not given is refused.
  CHECK(d.request(1, Dispatcher::kNone).empty());
  CHECK_THROWS_AS(d.request(0, 3), strata::invalid_argument);
}

TEST_CASE("Dispatcher.AWorkerThatLeavesEarlyGetsNoneAndGivesBack") {
  Dispatcher d(2, {0, 0});
  (void)d.request(0, Dispatcher::kNone);  // 0
  (void)d.request(0, Dispatcher::kNone);  // 1
  CHECK(d.request(1, Dispatcher::kNone).empty());
  CHECK(d.request(0, Dispatcher::kNone).empty());  // a third request, unanswered
  const auto left = d.leave(0);  // its loop broke before it reported a batch finished
  CHECK(to(left, 0) == std::vector<std::int64_t>{Dispatcher::kNone});  // its waiting request
  CHECK(to(left, 1) == std::vector<std::int64_t>{0});  // both its batches go back, 0 first
  CHECK(d.redispatched() == 2);
  CHECK(to(d.request(1, 0), 1) == std::vector<std::int64_t>{1});
  CHECK(to(d.request(1, 1), 1) == std::vector<std::int64_t>{Dispatcher::kNone});
  CHECK(d.complete());
}

// Thousands of drawn schedules of 1 to 4 workers, each keeping two requests in flight as the
// strategy's workers do, with losses at drawn moments (one worker always survives): every
// batch is completed, each exactly once unless a lost worker had finished it without its
// report arriving (a repeat, counted), and every surviving worker ends with "none".
TEST_CASE("Dispatcher.EveryBatchIsCompletedWhateverTheSchedule") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int workers = 1 + static_cast<int>(rng() % 4);
    const std::int64_t batches = static_cast<std::int64_t>(rng() % 12);
    Dispatcher d(batches, std::vector<char>(static_cast<std::size_t>(workers), 0));
    struct State {
      std::vector<std::int64_t> answers;  // received, not yet taken
      int in_flight = 0;
      std::int64_t training = Dispatcher::kNone;
      bool finished = false, lost = false;
    };
    std::vector<State> st(static_cast<std::size_t>(workers));
    std::vector<int> trained(static_cast<std::size_t>(batches), 0);
    auto deliver = [&](const std::vector<Dispatcher::Answer>& as) {
      for (const auto& a : as) {
        State& s = st[static_cast<std::size_t>(a.worker)];
        REQUIRE(!s.lost);
        s.answers.push_back(a.batch);
        --s.in_flight;
      }
    };
    for (int w = 0; w < workers; ++w) {
      st[static_cast<std::size_t>(w)].in_flight = 2;
      deliver(d.request(w, Dispatcher::kNone));
      deliver(d.request(w, Dispatcher::kNone));
    }
    int losses_left = workers - 1;
    for (int moves = 0; moves < 10000; ++moves) {
      std::vector<int> can;
      for (int w = 0; w < workers; ++w) {
        const State& s = st[static_cast<std::size_t>(w)];
        if (!s.lost && !s.finished && (s.training != Dispatcher::kNone || !s.answers.empty())) can.push_back(w);
      }
      if (can.empty()) break;
      const int w = can[rng() % can.size()];
      State& s = st[static_cast<std::size_t>(w)];
      if (losses_left > 0 && rng() % 10 == 0) {  // lost now, maybe after training its batch
        if (s.training != Dispatcher::kNone && rng() % 2) ++trained[static_cast<std::size_t>(s.training)];
        s.lost = true;
        --losses_left;
        deliver(d.lost(w));
        continue;
      }
      if (s.training != Dispatcher::kNone) {  // finishes its batch, reports it with a new request
        ++trained[static_cast<std::size_t>(s.training)];
        ++s.in_flight;
        deliver(d.request(w, s.training));
        s.training = Dispatcher::kNone;
        continue;
      }
      const std::int64_t b = s.answers.front();  // takes its oldest answer
      s.answers.erase(s.answers.begin());
      if (b == Dispatcher::kNone) {
        s.finished = true;
        CHECK(s.in_flight + static_cast<int>(s.answers.size()) <= 1);
        for (std::int64_t rest : s.answers) CHECK(rest == Dispatcher::kNone);
        CHECK(s.in_flight == 0);
      } else {
        s.training = b;
      }
    }
    for (const State& s : st) CHECK((s.lost || s.finished));
    CHECK(d.complete());
    CHECK(d.completed() == batches);
    std::int64_t repeats = 0;
    for (int n : trained) {
      CHECK(n >= 1);
      repeats += n - 1;
    }
    CHECK(d.repeated() <= repeats);
  }
}

TEST_CASE("Dispatcher.AWorkerThatJoinsTakesFromTheSameQueue") {
  Dispatcher d(4, {0});
  CHECK(to(d.request(0, Dispatcher::kNone), 0) == std::vector<std::int64_t>{0});
  CHECK(d.admit() == 1);  // the joiner's slot
  CHECK(to(d.request(1, Dispatcher::kNone), 1) == std::vector<std::int64_t>{1});
  CHECK(to(d.request(1, Dispatcher::kNone), 1) == std::vector<std::int64_t>{2});
  CHECK(to(d.request(0, 0), 0) == std::vector<std::int64_t>{3});
  // The joiner is lost holding batches 1 and 2: they go back, to worker 0's next requests.
  CHECK(d.lost(1).empty());
  CHECK(to(d.request(0, Dispatcher::kNone), 0) == std::vector<std::int64_t>{1});
  CHECK(to(d.request(0, 3), 0) == std::vector<std::int64_t>{2});
  CHECK(d.request(0, 1).empty());  // batch 2 still held by worker 0
  const auto last = d.request(0, 2);
  CHECK(to(last, 0) == std::vector<std::int64_t>{Dispatcher::kNone, Dispatcher::kNone});
  CHECK(d.complete());
  CHECK(d.completed() == 4);
  CHECK(d.redispatched() == 2);
  CHECK(d.repeated() == 0);
}

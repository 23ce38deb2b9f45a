// An elastic job's membership (runtime/membership.hpp): the authority's rules with the time
// passed in, then the store serving it to clients over real connections, whose closing is a
// lost member.
#include "doctest.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <strata/runtime/launcher.hpp>  // detail::free_port
#include <strata/runtime/membership.hpp>
#include <strata/runtime/tcp_store.hpp>

using strata::runtime::Membership;
using strata::runtime::MembershipOptions;
using strata::runtime::View;
using namespace std::chrono_literals;

namespace {
MembershipOptions options(int min, int max, int initial) {
  MembershipOptions o;
  o.min_workers = min;
  o.max_workers = max;
  o.initial_workers = initial;
  o.settle = 100ms;
  o.start_wait = 2000ms;
  return o;
}
using Members = std::vector<std::string>;
}  // namespace

TEST_CASE("Runtime.Membership.GenerationsFollowLossesJoinsAndEvictions") {
  Membership m(options(2, 4, 3));
  const auto t0 = Membership::Clock::now();
  CHECK(m.join("a", 10, t0).empty());
  CHECK(m.join("b", 11, t0 + 1ms).empty());
  CHECK_FALSE(m.settle(t0 + 500ms));  // two of the three initial workers: the first view waits
  CHECK(m.join("c", 12, t0 + 600ms).empty());
  CHECK(m.join("c", 13, t0 + 601ms) == "'c' is already a member");
  CHECK_FALSE(m.settle(t0 + 650ms));  // inside the settle window
  REQUIRE(m.settle(t0 + 700ms));
  CHECK(m.view().generation == 1);
  CHECK(m.view().members == Members{"a", "b", "c"});

  // Two losses inside one settle window are one generation; survivors keep their order.
  m.lost(11, t0 + 1000ms);
  CHECK(m.fence(1, "b").find("'b' is being dropped: its store connection closed") == 0);
  CHECK(m.fence(1, "a").empty());
  CHECK(m.join("d", 14, t0 + 1050ms).empty());
  REQUIRE(m.settle(t0 + 1150ms));
  CHECK(m.view().generation == 2);
  CHECK(m.view().members == Members{"a", "c", "d"});
  CHECK(m.fence(1, "b") == "dropped at generation 2: its store connection closed (the process ended)");
  CHECK(m.fence(1, "a").empty());  // a survivor of generation 1 may ask for generation 2
  CHECK(m.fence(3, "a") == "generation 3 has not been published");
  CHECK(m.fence(2, "zz") == "'zz' is not a member of generation 2");

  // The view is full at max_workers.
  CHECK(m.join("e", 15, t0 + 1200ms).empty());
  CHECK(m.join("f", 16, t0 + 1200ms) == "the job has max_workers=4 members");
  m.lost(15, t0 + 1210ms);  // e leaves before it was admitted: nothing changes
  CHECK_FALSE(m.deadline().has_value());

  // A member reports a peer that does not answer: its lease is closed, it is dropped.
  CHECK(m.evict(2, "a", "c", t0 + 1300ms).empty());
  CHECK(m.take_to_close() == std::vector<int>{12});
  CHECK(m.evict(2, "b", "d", t0 + 1300ms).find("dropped at generation 2") == 0);  // a dropped member cannot evict
  REQUIRE(m.settle(t0 + 1400ms));
  CHECK(m.view().members == Members{"a", "d"});
  CHECK(m.fence(2, "c") == "dropped at generation 3: evicted at the report of a: it did not answer");
  // Another survivor's report of the same member, arriving after the new view: already done.
  CHECK(m.evict(2, "d", "c", t0 + 1410ms).empty());
  CHECK_FALSE(m.deadline().has_value());

  // Below min_workers the job ends, naming who is left; every later request hears it.
  m.lost(14, t0 + 1500ms);
  REQUIRE(m.settle(t0 + 1600ms));
  CHECK(m.ended());
  CHECK(m.view().reason() == "the elastic job ended: below min_workers=2 at generation 4: left [a]");
  CHECK(m.fence(3, "a") == m.view().reason());
  CHECK(m.join("g", 17, t0 + 1700ms) == m.view().reason());
}

TEST_CASE("Runtime.Membership.TheFirstViewWaitsForTheInitialWorkers") {
  SUBCASE("min_workers are in when the wait ends: the job starts with them") {
    Membership m(options(2, 4, 3));
    const auto t0 = Membership::Clock::now();
    m.join("a", 1, t0);
    m.join("b", 2, t0);
    CHECK_FALSE(m.settle(t0 + 1999ms));
    REQUIRE(m.settle(t0 + 2000ms));
    CHECK(m.view().members == Members{"a", "b"});
  }
  SUBCASE("fewer than min_workers: the job ends, naming who came") {
    Membership m(options(3, 4, 3));
    const auto t0 = Membership::Clock::now();
    m.join("a", 1, t0);
    REQUIRE(m.settle(t0 + 2000ms));
    CHECK(m.view().reason() == "the elastic job ended: fewer than min_workers=3 joined within 2000 ms: [a]");
  }
  CHECK_THROWS_WITH_AS(Membership(options(3, 2, 2)), doctest::Contains("must satisfy 1 <= min <= max"),
                       strata::invalid_argument);
}

TEST_CASE("Runtime.Membership.ViewFramesAreBounded") {
  namespace wire = strata::runtime::membership_wire;
  View v;
  v.generation = 0x0102030405060708ull;
  v.members = {"host:1", "host:22", ""};
  View back;
  std::string why;
  REQUIRE(wire::decode(wire::encode(v), back, why));
  CHECK(back.generation == v.generation);
  CHECK(back.members == v.members);
  std::string frame = wire::encode(v);
  CHECK_FALSE(wire::decode(frame + "x", back, why));
  CHECK(why == "a view with 1 bytes left over");
  CHECK_FALSE(wire::decode(frame.substr(0, frame.size() - 1), back, why));
  frame[12] = '\xff';  // the member count
  frame[13] = '\xff';
  CHECK_FALSE(wire::decode(frame, back, why));
  CHECK(why.find("members (at most 4096)") != std::string::npos);
}

TEST_CASE("Runtime.Membership.TheStoreServesItOverLeases") {
  const int port = strata::runtime::detail::free_port();
  strata::runtime::store_protocol::Credentials creds;
  creds.token = "elastic-token";
  MembershipOptions o = options(2, 5, 4);
  strata::runtime::TcpStore store("127.0.0.1", port, true, 5000ms, creds, o);  // strata-run's side
  auto worker = [&] { return std::make_unique<strata::runtime::TcpStore>("127.0.0.1", port, false, 5000ms, creds); };

  std::vector<std::unique_ptr<strata::runtime::TcpStore>> w;
  for (int i = 0; i < 4; ++i) w.push_back(worker());
  std::vector<View> first(4);
  std::vector<std::thread> joins;
  for (int i = 0; i < 4; ++i) joins.emplace_back([&, i] { first[i] = w[i]->join("w" + std::to_string(i), 5000ms); });
  for (auto& t : joins) t.join();
  for (int i = 0; i < 4; ++i) {
    CHECK(first[i].generation == 1);
    CHECK(first[i].size() == 4);
    CHECK(first[i].members == first[0].members);  // one view for all
  }

  // Worker 2's process ends: its connection closes, and the survivors' wait returns the next
  // generation within the settle window.
  const std::string lost = "w2";
  const auto t0 = std::chrono::steady_clock::now();
  w[2].reset();
  const View second = w[0]->wait_view("w0", 1, 5000ms);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(second.generation == 2);
  CHECK(second.size() == 3);
  CHECK(second.rank_of(lost) == -1);
  CHECK(ms < 1000);
  MESSAGE("a lost member's next view after ", ms, " ms (settle window 100 ms)");

  // A new worker joins; the members see it at their next poll.
  auto joiner = worker();
  const View third = joiner->join("w4", 5000ms);
  CHECK(third.generation == 3);
  CHECK(third.rank_of("w4") == 3);  // joiners come after the survivors
  CHECK(w[1]->poll_view("w1", 2).generation == 3);

  // A member that does not answer is evicted at another's report: the store closes its lease,
  // and the process, when it comes back, is refused with the reason.
  CHECK(w[0]->evict("w0", 3, "w3").state == View::State::member);
  const View fourth = w[0]->wait_view("w0", 3, 5000ms);
  CHECK(fourth.rank_of("w3") == -1);
  const View back = w[3]->poll_view("w3", 3);  // its connection was closed: it reconnects and asks
  CHECK(back.state == View::State::refused);
  CHECK(back.reason() == "dropped at generation 4: evicted at the report of w0: it did not answer");

  // Below min_workers=2 every waiting member hears that the job ended, and who is left.
  std::thread waiter([&] {
    const View end = w[0]->wait_view("w0", 4, 5000ms);
    CHECK(end.state == View::State::ended);
    CHECK(end.reason() == "the elastic job ended: below min_workers=2 at generation 5: left [w0]");
  });
  w[1].reset();
  joiner.reset();
  waiter.join();

  // A store without membership says so.
  const int plain_port = strata::runtime::detail::free_port();
  strata::runtime::TcpStore plain("127.0.0.1", plain_port, true, 5000ms, creds);
  CHECK(plain.join("x", 1000ms).reason().find("serves no elastic job") != std::string::npos);
}

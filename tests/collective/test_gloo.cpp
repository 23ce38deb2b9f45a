// The conformance suite (conformance.hpp) on collective::Gloo, run under strata-run -np 4:
// groups of 1 to 4 ranks (one Gloo context per group size, made once) over TCP on 127.0.0.1.
// Every rank runs the tests; the exit status is the worst over all ranks.
#define DOCTEST_CONFIG_IMPLEMENT
#include "collective/conformance.hpp"

#include <chrono>
#include <map>
#include <thread>
#include <memory>

#include <strata/collective/gloo.hpp>

using strata::collective::Gloo;

// The capabilities Gloo opts into, and those it lacks (collective/capabilities.hpp).
static_assert(strata::Collective<Gloo> && strata::collective::RawCollective<Gloo> &&
              strata::collective::WireCompression<Gloo> && strata::collective::HostSharedMemory<Gloo>);
static_assert(!strata::collective::DeviceCollective<Gloo> && !strata::collective::ThreadGroupCollective<Gloo>);

namespace {
Gloo& world() {
  static Gloo w("world");
  return w;
}
/// One communicator per group size, shared by every test (a rendezvous prefix is single-use).
std::map<int, std::unique_ptr<Gloo>>& groups() {
  static std::map<int, std::unique_ptr<Gloo>> g;
  return g;
}
}  // namespace

template <>
struct World<Gloo> {
  template <class F>
  static void run(int n, F&& fn) {
    const auto p = strata::runtime::detect_process();
    if (n <= p.world_size && p.rank < n) {
      auto& g = groups()[n];
      if (!g) {
        auto sub = p;
        sub.world_size = n;
        g = std::make_unique<Gloo>(sub, "group" + std::to_string(n), strata::collective::Options::from_env());
      }
      try {
        fn(*g);
      } catch (...) {
        world().barrier();  // keep the other ranks in step, then report
        throw;
      }
    }
    world().barrier();
  }
};

TEST_CASE_TEMPLATE_INVOKE(allreduce_suite, Gloo);
TEST_CASE_TEMPLATE_INVOKE(data_movement_suite, Gloo);
TEST_CASE_TEMPLATE_INVOKE(async_suite, Gloo);
TEST_CASE_TEMPLATE_INVOKE(async_gather_suite, Gloo);
TEST_CASE_TEMPLATE_INVOKE(shared_buffer_suite, Gloo);

TEST_CASE("Collective.Gloo.MismatchMatrix") {
  const auto p = strata::runtime::detect_process();
  if (p.world_size < 2) return;
  strata::collective::Options o = strata::collective::Options::from_env();
  o.check_fingerprints = true;
  for (int k = 0; k < conformance::kMismatchCases; ++k) {
    Gloo c(p, "mismatch" + std::to_string(k), o);
    conformance::mismatch_case(c, k);
  }
}

// Shared buffers, count 8 on rank 0 and 4 on the others: every rank fails naming both sides;
// and a rank that stops arriving is named by the others within the deadline.
TEST_CASE("Collective.Gloo.SharedBufferMismatchAndAbsence") {
  const auto p = strata::runtime::detect_process();
  if (p.world_size < 2) return;
  {
    Gloo c(p, "shm_mismatch", strata::collective::Options::from_env());
    strata::Tensor buf = c.shared_buffer(8, strata::DType::f32);
    REQUIRE(buf.defined());
    buf.fill_(1.0);
    const std::size_t count = c.rank() == 0 ? 8 : 4;
    CHECK_THROWS_WITH_AS(c.allreduce_raw(buf.raw_data(), buf.raw_data(), count, strata::DType::f32, strata::ReduceOp::Sum),
                         doctest::Contains("[strata.collective.mismatch] allreduce #"), strata::collective_error);
  }
  world().barrier();
  {
    strata::collective::Options o;
    o.timeout = std::chrono::milliseconds(1500);
    Gloo c(p, "shm_absent", o);
    strata::Tensor buf = c.shared_buffer(8, strata::DType::f32);
    REQUIRE(buf.defined());
    if (c.rank() != 0) {  // rank 0 never arrives
      const auto t0 = std::chrono::steady_clock::now();
      CHECK_THROWS_WITH_AS(c.allreduce_raw(buf.raw_data(), buf.raw_data(), 8, strata::DType::f32, strata::ReduceOp::Sum),
                           doctest::Contains("did not arrive: rank 0"), strata::error);
      CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
    }
  }
  world().barrier();
}

// RELIABILITY A6: rank 0 never enters the barrier; on the others a watchdog thread calls
// abort() 300 ms in. Their wait ends then (not at the 20 s deadline) with the abort's reason;
// rank 0's later barrier fails at once (the others' connections are closed); a new
// communicator works.
TEST_CASE("Collective.Gloo.AbortUnblocksAWaitingRank") {
  using Clock = std::chrono::steady_clock;
  const auto p = strata::runtime::detect_process();
  if (p.world_size < 2) return;
  strata::collective::Options o;
  o.timeout = std::chrono::seconds(20);
  Gloo c(p, "abort", o);
  const auto t0 = Clock::now();
  if (c.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    CHECK_THROWS_AS(c.barrier(), strata::collective_error);
  } else {
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.abort("watchdog on rank " + std::to_string(c.rank()));
    });
    CHECK_THROWS_WITH_AS(c.barrier(), doctest::Contains("[strata.collective.aborted] barrier #0"), strata::collective_error);
    watchdog.join();
    CHECK_THROWS_WITH_AS(c.barrier(), doctest::Contains("watchdog on rank"), strata::collective_error);  // stays failed
  }
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 5.0);  // T/4
  world().barrier();
  Gloo fresh(p, "after_abort", o);
  std::vector<int> one{1};
  fresh.allreduce(std::span(one), strata::ReduceOp::Sum);
  CHECK(one[0] == fresh.size());
}

// A rendezvous whose peers will never come (an elastic generation a newer one replaced) ends
// as soon as its Options::rendezvous_abandoned gives a reason, not at its timeout.
TEST_CASE("Collective.Gloo.AbandonedRendezvousEndsAtOnce") {
  using Clock = std::chrono::steady_clock;
  const auto p = strata::runtime::detect_process();
  if (p.world_size < 2 || !p.rendezvous_dir.empty()) return;  // the TCP store's waits only
  if (p.rank == 0) {
    strata::collective::Options o;
    o.timeout = std::chrono::seconds(20);
    const auto t0 = Clock::now();
    o.rendezvous_abandoned = [&]() -> std::string {
      return Clock::now() - t0 > std::chrono::milliseconds(300) ? "generation 3 replaced generation 2" : "";
    };
    CHECK_THROWS_WITH_AS(Gloo(p, "abandoned", o), doctest::Contains("abandoned: generation 3 replaced generation 2"),
                         strata::collective_error);
    CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 2.0);  // not the 20 s timeout
  }
  // The other ranks never join "abandoned"; and with a reason that stays empty, a rendezvous
  // completes as usual.
  world().barrier();
  strata::collective::Options o;
  o.rendezvous_abandoned = [] { return std::string(); };
  Gloo kept(p, "kept", o);
  std::vector<int> one{1};
  kept.allreduce(std::span(one), strata::ReduceOp::Sum);
  CHECK(one[0] == kept.size());
}

TEST_CASE("Collective.Gloo.BadInterfaceListsTheAvailableOnes") {
  ::setenv("STRATA_IFNAME", "nosuchif0", 1);
  auto p = strata::runtime::detect_process();
  p.world_size = 1;
  p.rank = 0;
  CHECK_THROWS_WITH_AS(Gloo(p, "badif", strata::collective::Options{}), doctest::Contains("lo"),
                       strata::invalid_argument);
  ::unsetenv("STRATA_IFNAME");
}

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  ctx.setOption("no-colors", true);
  if (world().rank() != 0) ctx.setOption("minimal", true);
  int result = ctx.run();
  std::vector<int> r{result};
  world().allreduce(std::span(r), strata::ReduceOp::Max);
  return r[0];
}

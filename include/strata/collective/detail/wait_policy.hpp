/// \file
/// How long a rank that waits for its peers at a barrier spins before it gives its core away.
/// Spinning costs nothing where the core has no other work, and a sleep costs far more than
/// its length: a 50 µs sleep_for took 120 µs on average here, and a futex wake-up of a halted
/// virtual CPU tens of µs. So a replica's own thread on a host with a core for each rank spins
/// up to kLongSpin (STRATA_SPIN_US; well past a step's usual skew between replicas, 100–300
/// µs on a busy host); everywhere else — more ranks than cores, or a background thread whose
/// rank computes on the same core — a waiter spins briefly and sleeps soon
/// (docs/performance.md). A long spin that runs out is the sign that the peer is not running
/// (another job holds its core, or the scheduler has put it beside one): spinning on would
/// keep from it the core it could move to, so the thread then spins briefly for its next waits
/// (SpinBackoff) and tries the long spin again later. Barriers call spin_wait, then yield or
/// sleep as they see fit.
#pragma once

#include <algorithm>  // std::min
#include <chrono>
#include <cstdint>
#include <thread>  // hardware_concurrency

#include <strata/runtime/process.hpp>  // env, env_int

namespace strata::collective::detail {

inline constexpr std::chrono::microseconds kLongSpin{2000};
/// The most spins before a wait gives its core away where the ranks outnumber the cores.
inline constexpr int kOversubscribedSpins = 64;

/// STRATA_SPIN_US if set (0 .. 1,000,000 µs; 0: never spin long, e.g. where other jobs share
/// the cores), else kLongSpin. Read once; a bad value is an error naming the variable.
inline std::chrono::microseconds long_spin_budget() {
  static const std::chrono::microseconds budget = [] {
    const char* v = runtime::detail::env("STRATA_SPIN_US");
    return v ? std::chrono::microseconds(runtime::detail::env_int("STRATA_SPIN_US", v, 0, 1'000'000)) : kLongSpin;
  }();
  return budget;
}

/// One turn of a spin loop: tells the core (and an SMT sibling) that this thread is waiting.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Seconds this thread has spent blocked waiting for other ranks (barriers, flags, the
/// gradient buckets, every collective a policy runs on the thread): a step's wall time less
/// what this grew by is the time the thread was busy (RowBalance weighs the replicas by it,
/// StragglerScores scores the ranks by it).
inline double& thread_wait_seconds() noexcept {
  thread_local double seconds = 0;
  return seconds;
}

/// True on the threads that run collectives in the background (AsyncWorker, the gradient
/// engine's communication thread): their rank computes meanwhile, so they never spin long,
/// and their time in collectives is not a wait of the rank's.
inline thread_local bool on_background_thread = false;

/// Adds the time from its construction to its destruction to thread_wait_seconds(): the
/// outermost of nested timers only (a collective inside a wait is one wait), and nothing on a
/// background thread.
class WaitTimer {
 public:
  WaitTimer() noexcept {
    if (!on_background_thread && depth()++ == 0) from_ = std::chrono::steady_clock::now();
  }
  ~WaitTimer() {
    if (on_background_thread) return;
    if (--depth() == 0)
      thread_wait_seconds() += std::chrono::duration<double>(std::chrono::steady_clock::now() - from_).count();
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  static int& depth() noexcept {
    thread_local int d = 0;
    return d;
  }
  std::chrono::steady_clock::time_point from_;
};

/// Whether a waiter on this thread may spin for long_spin_budget() when `ranks` ranks share
/// this host.
inline bool may_spin_long(int ranks) {
  static const unsigned cores = std::thread::hardware_concurrency();
  return !on_background_thread && ranks > 0 && cores >= static_cast<unsigned>(ranks) &&
         long_spin_budget().count() > 0;
}

/// Spins until ready() or `budget` has passed, reading the clock every 64 spins; returns
/// ready().
template <class Ready>
bool spin_for(std::chrono::microseconds budget, Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= until) return ready();
  }
}

/// A thread's record of whether its long spins pay. When one runs out, the thread's next
/// `next` waits spin briefly, and `next` doubles (up to kMost) each time the long spin it tries
/// after them runs out too; a long spin that ends in time sets it back to kFirst.
class SpinBackoff {
 public:
  static constexpr std::uint32_t kFirst = 16;   ///< brief waits after a first long spin ran out
  static constexpr std::uint32_t kMost = 1024;  ///< at most this many in a row

  /// Whether this wait may spin long (counts a brief one down otherwise).
  bool long_now() noexcept {
    if (brief_left_ == 0) return true;
    --brief_left_;
    return false;
  }
  void ran_out() noexcept {
    brief_left_ = next_;
    next_ = std::min(next_ * 2, kMost);
  }
  void paid() noexcept { next_ = kFirst; }
  std::uint32_t brief_left() const noexcept { return brief_left_; }

 private:
  std::uint32_t brief_left_ = 0;
  std::uint32_t next_ = kFirst;
};

/// The calling thread's SpinBackoff.
inline SpinBackoff& spin_backoff() noexcept {
  thread_local SpinBackoff backoff;
  return backoff;
}

/// The spin before a barrier gives its core away, for `ranks` ranks on this host: up to
/// long_spin_budget() where may_spin_long and the thread's long spins pay (SpinBackoff), else
/// `brief_spins` turns. Returns ready().
template <class Ready>
bool spin_wait(int ranks, int brief_spins, Ready&& ready) {
  // More ranks than cores: a peer that has not arrived most likely waits for a core, perhaps
  // this one, so give it away soon (4 ranks on 2 cores, a 64 KiB reduce-scatter through shared
  // memory: 1.3 ms with 16384 spins a barrier; bench_collectives_mpi).
  static const unsigned cores = std::thread::hardware_concurrency();
  if (cores != 0 && static_cast<unsigned>(ranks) > cores) brief_spins = std::min(brief_spins, kOversubscribedSpins);
  if (SpinBackoff& backoff = spin_backoff(); may_spin_long(ranks) && backoff.long_now()) {
    if (spin_for(long_spin_budget(), ready)) {
      backoff.paid();
      return true;
    }
    backoff.ran_out();
    return false;
  }
  for (int i = 0; i < brief_spins; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  return ready();
}

}  // namespace strata::collective::detail

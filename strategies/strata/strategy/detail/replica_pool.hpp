/// \file
/// ReplicaPool: the threads that run the local replicas of an in-process strategy. Replica 0
/// is the calling thread; replicas 1..N-1 are threads started once and kept, each with its own
/// autograd tape (thread-local), so a step costs a wake-up, not a thread start. Hand-off is an
/// atomic generation counter: spin briefly, then sleep on it (futex), no lock on the way.
/// Between steps the pool also copies the next batch's rows (ReplicaPoolRows), so that work is
/// shared by the replica threads instead of left to the caller's while the others wait. Every
/// replica runs under the caller's precision policy (precision/policy.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include <strata/collective/detail/wait_policy.hpp>  // cpu_relax
#include <strata/collective/options.hpp>
#include <strata/data/pipeline.hpp>    // RowParallelism, split_begin
#include <strata/precision/policy.hpp>
#include <strata/strategy/replicated.hpp>  // ReplicaScope
#include <strata/support/error.hpp>

namespace strata::detail {

class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas) : n_(replicas), errors_(static_cast<std::size_t>(replicas)) {
    for (int r = 1; r < n_; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~ReplicaPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const noexcept { return n_; }

  /// Runs fn(r) for every replica r, concurrently, and returns when all have finished. When
  /// one throws, `on_error(r, what)` runs at once on its thread (to abort the collectives the
  /// others may be blocked in), and the root cause is rethrown here once all have returned:
  /// an error of the replica's own before a collective_error that the abort caused.
  template <class F, class OnError>
  void run(F& fn, OnError& on_error) {
    // The pool may be copying a batch's rows for a prefetching thread: that takes microseconds.
    while (!try_run(fn, on_error)) std::this_thread::yield();
  }
  /// run(), or false at once when the pool is running something else.
  template <class F, class OnError>
  bool try_run(F& fn, OnError& on_error) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    struct Release {
      std::atomic<bool>& busy;
      ~Release() { busy.store(false, std::memory_order_release); }
    } release{busy_};
    job_ = &fn;
    call_ = [](void* f, int r) { (*static_cast<F*>(f))(r); };
    job_error_ = &on_error;
    error_call_ = [](void* f, int r, const char* what) { (*static_cast<OnError*>(f))(r, what); };
    policy_ = precision::current();
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    if (n_ > 1) generation_.notify_all();
    execute(0);
    // Wait for the others: spin a little (steps are short), then sleep.
    int seen = done_.load(std::memory_order_acquire);
    for (int i = 0, spins = handoff_spins(); i < spins && seen != n_ - 1; ++i) {
      collective::detail::cpu_relax();
      seen = done_.load(std::memory_order_acquire);
    }
    while (seen != n_ - 1) {
      done_.wait(seen, std::memory_order_acquire);
      seen = done_.load(std::memory_order_acquire);
    }
    rethrow();
    return true;
  }

 private:
  // Turns a hand-off spins before it sleeps: a step's skew's worth, unless this thread's long
  // spins at barriers have lately run out (collective::detail::SpinBackoff), a sign that the
  // thread it waits for is not running; then a few, so that the core is free to take it.
  static int handoff_spins() noexcept { return collective::detail::spin_backoff().brief_left() > 0 ? 256 : 20000; }

  void execute(int r) {
    ReplicaScope scope(r, /*step=*/true, /*in_sync=*/n_);
    const precision::Scope policy(policy_);
    try {
      call_(job_, r);
    } catch (const std::exception& e) {
      errors_[static_cast<std::size_t>(r)] = std::current_exception();
      error_call_(job_error_, r, e.what());
    } catch (...) {
      errors_[static_cast<std::size_t>(r)] = std::current_exception();
      error_call_(job_error_, r, "unknown exception");
    }
  }

  void loop(int r) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      for (int i = 0, spins = handoff_spins(); i < spins && g == seen; ++i) {
        collective::detail::cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
      while (g == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_.load(std::memory_order_relaxed)) return;
      execute(r);
      done_.fetch_add(1, std::memory_order_acq_rel);
      done_.notify_one();
    }
  }

  void rethrow() {
    std::exception_ptr first, own;
    for (auto& e : errors_) {
      if (!e) continue;
      if (!first) first = e;
      try {
        std::rethrow_exception(e);
      } catch (const collective_error&) {
      } catch (...) {
        if (!own) own = e;
      }
      e = nullptr;
    }
    if (own) std::rethrow_exception(own);
    if (first) std::rethrow_exception(first);
  }

  int n_;
  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  void* job_ = nullptr;
  void (*call_)(void*, int) = nullptr;
  void* job_error_ = nullptr;
  void (*error_call_)(void*, int, const char*) = nullptr;
  precision::Policy policy_;  // the caller's, for the replica threads
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
};

/// The pool's threads as a pipeline's RowParallelism: a batch's rows are copied in one part
/// per replica thread. When the pool is busy (a step in flight) or gone, the calling thread
/// copies them all.
class ReplicaPoolRows final : public data::RowParallelism {
 public:
  explicit ReplicaPoolRows(std::weak_ptr<ReplicaPool> pool) : pool_(std::move(pool)) {}
  void run(std::int64_t n, void (*fn)(void*, std::int64_t, std::int64_t), void* ctx) override {
    const std::shared_ptr<ReplicaPool> pool = pool_.lock();
    if (pool) {
      const int parts = pool->size();
      auto part = [&](int r) { fn(ctx, data::detail::split_begin(n, r, parts), data::detail::split_begin(n, r + 1, parts)); };
      auto ignore = [](int, const char*) {};  // copying rows throws nothing; run() rethrows anyway
      if (pool->try_run(part, ignore)) return;
    }
    fn(ctx, 0, n);
  }

 private:
  std::weak_ptr<ReplicaPool> pool_;
};

}  // namespace strata::detail

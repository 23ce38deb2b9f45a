/// \file
/// NcclWatchdog: the deadline of the NCCL work a rank does not wait for with its own polls —
/// collectives ordered on the device behind the compute stream (join_compute), and a blocking
/// call's wait inside the CUDA runtime (cudaStreamSynchronize). A thread per communicator
/// looks every millisecond while such work is in flight (every few while none is): at the
/// first failure (NCCL's asynchronous error, the bootstrap group aborted, a deadline passed)
/// it calls `fail` once, which aborts the communicator, so NCCL's kernels exit and whatever
/// the host waits on in the CUDA runtime returns; the rank's next call then throws the error.
/// A blocking call costs two clock reads and an uncontended lock: the watchdog is not woken.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_CUDA
#error "strata's NCCL watchdog needs CUDA: configure strata with -Dcuda=enabled -Dnccl=enabled"
#else

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/collective/options.hpp>  // Fingerprint
#include <strata/kernels/cuda/runtime.hpp>

namespace strata::collective::detail {

class NcclWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Failure { none, error, bootstrap, expired };
  /// The communicator's health, polled while work is in flight: Failure::none, or the failure
  /// and its text in `why`.
  using Health = std::function<Failure(std::string& why)>;
  /// Called once, on the watchdog's thread, at the first failure (expired: `why` names the call).
  using Fail = std::function<void(Failure, const std::string& why)>;

  NcclWatchdog(int device, Health health, Fail fail)
      : device_(device), health_(std::move(health)), fail_(std::move(fail)), thread_([this] { loop(); }) {}
  ~NcclWatchdog() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  /// An event to record after queued work (from a pool: no cudaEventCreate per step).
  kernels::cuda::Event take_event() {
    std::lock_guard lock(mu_);
    if (spare_.empty()) return kernels::cuda::Event();
    kernels::cuda::Event e = std::move(spare_.back());
    spare_.pop_back();
    return e;
  }
  /// Work recorded by `done` must finish by `deadline`.
  void watch(kernels::cuda::Event done, Clock::time_point deadline, const Fingerprint& fp) {
    {
      std::lock_guard lock(mu_);
      pending_.push_back({std::move(done), deadline, fp});
    }
    cv_.notify_one();
  }

  /// A blocking call's wait in the CUDA runtime, for the scope's lifetime: at `deadline` the
  /// watchdog fails the communicator, which ends the wait.
  class Blocking {
   public:
    Blocking(NcclWatchdog& w, const Fingerprint& fp, Clock::time_point deadline) : w_(w) {
      std::lock_guard lock(w_.blocking_mu_);
      w_.blocking_fp_ = fp;
      w_.blocking_until_ = deadline;
      w_.blocking_.store(true, std::memory_order_release);
    }
    ~Blocking() { w_.blocking_.store(false, std::memory_order_release); }
    Blocking(const Blocking&) = delete;
    Blocking& operator=(const Blocking&) = delete;

   private:
    NcclWatchdog& w_;
  };

 private:
  struct Pending {
    kernels::cuda::Event done;
    Clock::time_point deadline;
    Fingerprint fp;
  };

  void loop() {
    kernels::cuda::set_thread_device(device_);  // its events' device: no context elsewhere
    std::unique_lock lock(mu_);
    bool failed = false;
    while (!stop_) {
      const bool busy = !pending_.empty() || blocking_.load(std::memory_order_acquire);
      cv_.wait_for(lock, busy ? std::chrono::milliseconds(1) : std::chrono::milliseconds(5));
      if (stop_ || failed) continue;
      while (!pending_.empty() && pending_.front().done.done()) {
        spare_.push_back(std::move(pending_.front().done));
        pending_.pop_front();
      }
      const bool blocking = blocking_.load(std::memory_order_acquire);
      if (pending_.empty() && !blocking) continue;
      // The earliest deadline of what is in flight, and its call.
      Clock::time_point until = Clock::time_point::max();
      Fingerprint fp{};
      if (!pending_.empty()) until = pending_.front().deadline, fp = pending_.front().fp;
      if (blocking) {
        std::lock_guard b(blocking_mu_);
        if (blocking_until_ < until) until = blocking_until_, fp = blocking_fp_;
      }
      lock.unlock();
      std::string why;
      Failure f = health_(why);
      if (f == Failure::none && Clock::now() > until) {
        f = Failure::expired;
        why = fp.str();
      }
      if (f != Failure::none) {
        fail_(f, why);
        failed = true;
      }
      lock.lock();
      if (failed) {  // the communicator is aborted: nothing pending will be waited for
        for (Pending& p : pending_) spare_.push_back(std::move(p.done));
        pending_.clear();
      }
    }
  }

  int device_;
  Health health_;
  Fail fail_;
  std::mutex mu_;  // pending_, spare_, stop_
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<kernels::cuda::Event> spare_;
  bool stop_ = false;
  std::mutex blocking_mu_;  // blocking_fp_, blocking_until_
  std::atomic<bool> blocking_{false};
  Fingerprint blocking_fp_{};
  Clock::time_point blocking_until_{};
  std::thread thread_;  // last: started once the rest is made
};

}  // namespace strata::collective::detail

#endif  // STRATA_HAS_CUDA

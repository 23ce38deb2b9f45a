/// \file
/// Asynchronous collectives for policies whose library has no non-blocking call: a Work handle,
/// a per-rank worker thread that runs the rank's queued collectives in call order, and the
/// asynchronous forms written once over a policy's blocking core (AsyncOnCommThread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <strata/collective/detail/wait_policy.hpp>  // cpu_relax, on_background_thread
#include <strata/collective/reduce_op.hpp>
#include <strata/collective/typed_front_end.hpp>  // the size checks
#include <strata/tensor/dtype.hpp>

namespace strata::collective {

/// Completion state of an asynchronous collective.
class Work {
 public:
  Work() = default;
  /// Blocks until the collective has completed on this rank; rethrows its error.
  void wait() {
    if (!st_) return;
    for (int i = 0; i < 4000 && !st_->done.load(std::memory_order_acquire); ++i) detail::cpu_relax();
    if (!st_->done.load(std::memory_order_acquire)) {
      std::unique_lock lock(st_->mu);
      st_->cv.wait(lock, [&] { return st_->done.load(std::memory_order_acquire); });
    }
    if (st_->error) std::rethrow_exception(std::exchange(st_->error, nullptr));
  }
  /// True once the collective has completed (successfully or not).
  bool test() const noexcept { return !st_ || st_->done.load(std::memory_order_acquire); }

  struct State {
    std::atomic<bool> done{false};
    std::exception_ptr error;
    std::mutex mu;
    std::condition_variable cv;
    /// Re-arms a completed state for the next collective (its Work has been waited for), so
    /// a caller that issues one collective per step can keep one State instead of allocating.
    void reset() noexcept {
      error = nullptr;
      done.store(false, std::memory_order_relaxed);
    }
    void finish(std::exception_ptr e) {
      error = e;
      {
        std::lock_guard lock(mu);
        done.store(true, std::memory_order_release);
      }
      cv.notify_all();
    }
  };
  explicit Work(std::shared_ptr<State> st) : st_(std::move(st)) {}

 private:
  std::shared_ptr<State> st_;
};

namespace detail {

/// Runs one rank's asynchronous collectives in call order on a thread started on first use.
class AsyncWorker {
 public:
  AsyncWorker() = default;
  AsyncWorker(AsyncWorker&& o) noexcept : st_(std::move(o.st_)) {}
  AsyncWorker& operator=(AsyncWorker&&) = delete;
  ~AsyncWorker() { stop(); }

  void enqueue(std::function<void()> job) {
    if (!st_) {
      st_ = std::make_unique<State>();
      st_->thread = std::thread([s = st_.get()] { s->loop(); });
    }
    std::unique_lock lock(st_->mu);
    st_->jobs.push_back(std::move(job));
    ++st_->pending;
    lock.unlock();
    st_->cv.notify_all();
  }
  /// Waits until every queued job has run: a blocking collective goes after them.
  void drain() {
    if (!st_) return;
    std::unique_lock lock(st_->mu);
    st_->cv.wait(lock, [&] { return st_->pending == 0; });
  }
  void stop() {
    if (!st_) return;
    {
      std::lock_guard lock(st_->mu);
      st_->stop = true;
    }
    st_->cv.notify_all();
    st_->thread.join();
    st_.reset();
  }

 private:
  struct State {
    // Room for a step's buckets and more: queueing a job does not grow the queue (an
    // allocation in a training step) unless more than this many are waiting at once.
    State() { jobs.reserve(64); }
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::function<void()>> jobs;
    std::size_t pending = 0;
    bool stop = false;
    void loop() {
      detail::on_background_thread = true;
      std::unique_lock lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return stop || !jobs.empty(); });
        if (jobs.empty()) return;  // stop requested and nothing left
        auto job = std::move(jobs.front());
        jobs.erase(jobs.begin());
        lock.unlock();
        job();
        lock.lock();
        --pending;
        cv.notify_all();
      }
    }
  };
  std::unique_ptr<State> st_;
};

/// Runs `op` and completes `st` with its outcome (its exception, if it throws).
template <class Op>
void complete(Work::State& st, Op&& op) noexcept {
  try {
    op();
    st.finish(nullptr);
  } catch (...) {
    st.finish(std::current_exception());
  }
}

/// Queues `op` on `worker` and returns the Work that completes (or fails) with it.
template <class Op>
Work run_async(AsyncWorker& worker, Op op) {
  auto st = std::make_shared<Work::State>();
  worker.enqueue([op = std::move(op), st]() mutable { complete(*st, op); });
  return Work(st);
}

}  // namespace detail

/// iallreduce, iallgather and ireduce_scatter of a policy (InProcess, Gloo) that runs them on
/// its communication thread (`comm_thread()`, a detail::AsyncWorker) in call order: each one
/// its blocking core's call (allreduce_raw, ...) as a Work. The buffers must stay untouched
/// until the Work is waited on.
template <class Policy>
class AsyncOnCommThread {
 public:
  template <class T>
  Work iallreduce(std::span<T> x, ReduceOp op) {
    Policy& c = self();
    return detail::run_async(c.comm_thread(), [&c, p = x.data(), n = x.size(), op] {
      c.allreduce_raw(p, p, n, dtype_v<T>, op);
    });
  }
  /// `out`: rank k's `in` at k |in|.
  template <class T>
  Work iallgather(std::span<const T> in, std::span<T> out) {
    Policy& c = self();
    detail::check_allgather_sizes(in.size(), out.size(), c.size());
    return detail::run_async(c.comm_thread(), [&c, i = in.data(), o = out.data(), n = in.size()] {
      c.allgather_raw(i, o, n, dtype_v<T>);
    });
  }
  /// `out`: this rank's share of op over every rank's `in`.
  template <class T>
  Work ireduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {
    Policy& c = self();
    detail::check_reduce_scatter_sizes(in.size(), out.size(), c.size());
    return detail::run_async(c.comm_thread(), [&c, i = in.data(), o = out.data(), n = out.size(), op] {
      c.reduce_scatter_raw(i, o, n, dtype_v<T>, op);
    });
  }

 private:
  Policy& self() noexcept { return static_cast<Policy&>(*this); }
};

}  // namespace strata::collective

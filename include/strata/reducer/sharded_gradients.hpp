/// \file
/// GradientLayout and ShardedGradients: how MirroredStrategy's replicas hold the summed
/// gradients after backward.
///
/// With the split update each replica updates only its share of every bucket, so it needs the
/// sum only there. GradientLayout::sharded has each replica's gradient engine, in the steps
/// whose update splits, reduce its share into its own buffer alone
/// (InProcess::allreduce_or_share_raw): no replica writes into another's buckets, the writes
/// that cost most between cores (docs/gradient_engine.md, "Sharded gradients"). The rest of a
/// replica's buffer keeps its own gradient until someone reads it through Gradients: then
/// ShardedGradients copies the other replicas' shares in, each as soon as its replica has
/// reduced it.
#pragma once


#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/detail/reduce.hpp>       // share_begin
#include <strata/collective/detail/wait_policy.hpp>  // spin_wait
#include <strata/reducer/options.hpp>
#include <strata/runtime/process.hpp>  // env
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// The bucket buffers of every replica of one model, and how far each replica has reduced
/// its share of each.
class ShardedGradients {
 public:
  explicit ShardedGradients(int replicas) : buffers_(static_cast<std::size_t>(replicas)), done_(buffers_.size()) {
    STRATA_CHECK(replicas >= 1, "ShardedGradients: ", replicas, " replicas");
  }
  int replicas() const noexcept { return static_cast<int>(buffers_.size()); }

  /// Replica r's bucket buffers, in bucket order (before any step runs).
  void attach(int r, std::vector<Tensor> buffers) {
    const std::size_t ur = index(r);
    done_[ur] = std::make_unique<Flag[]>(buffers.size());
    buffers_[ur] = std::move(buffers);
  }

  /// Replica r has reduced its share of bucket b in step `step` (1, 2, ...).
  void reduced(int r, std::size_t b, std::uint64_t step) noexcept {
    done_[static_cast<std::size_t>(r)][b].step.store(step, std::memory_order_release);
  }

  /// Copies the other replicas' shares of bucket b, as they reduced them in `step`, into
  /// replica r's buffer, waiting for each. `abandoned()` says the group has failed; after
  /// `timeout` the wait is an error naming the replica it waited for.
  template <class Abandoned>
  void gather(int r, std::size_t b, std::uint64_t step, std::chrono::milliseconds timeout, Abandoned&& abandoned) {
    const std::size_t ur = index(r);
    const Tensor& mine = buffers_[ur].at(b);
    const std::size_t count = static_cast<std::size_t>(mine.numel()), es = size_of(mine.dtype());
    const int n = replicas();
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const auto uq = static_cast<std::size_t>(q);
      wait(done_[uq][b].step, step, q, timeout, abandoned);
      const std::size_t lo = collective::detail::share_begin(count, q, n), hi = collective::detail::share_begin(count, q + 1, n);
      if (hi > lo)
        std::memcpy(static_cast<char*>(mine.raw_data()) + lo * es,
                    static_cast<const char*>(buffers_[uq][b].raw_data()) + lo * es, (hi - lo) * es);
    }
  }

 private:
  struct alignas(64) Flag {
    std::atomic<std::uint64_t> step{0};
  };

  std::size_t index(int r) const {
    STRATA_CHECK(r >= 0 && r < replicas(), "ShardedGradients: replica ", r, " of ", replicas());
    return static_cast<std::size_t>(r);
  }

  template <class Abandoned>
  void wait(const std::atomic<std::uint64_t>& flag, std::uint64_t step, int q, std::chrono::milliseconds timeout,
            Abandoned& abandoned) const {
    const collective::detail::WaitTimer waiting;
    auto ready = [&] { return flag.load(std::memory_order_acquire) >= step; };
    if (collective::detail::spin_wait(replicas(), 4096, ready)) return;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (std::uint32_t polls = 0; !ready(); ++polls) {
      if (abandoned())
        STRATA_THROW(collective_error, "strata.collective.aborted",
                     "completing sharded gradients: the replicas' group was "
                     "aborted while waiting for replica ", std::to_string(q));
      if (std::chrono::steady_clock::now() > deadline)
        STRATA_THROW(timeout_error, "strata.collective.timeout", "completing sharded gradients: replica ",
                     std::to_string(q), " has not reduced its share of step ", std::to_string(step), " within ", std::to_string(std::chrono::duration<double>(timeout).count()), " s");
      if (polls < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::vector<std::vector<Tensor>> buffers_;   // per replica, per bucket
  std::vector<std::unique_ptr<Flag[]>> done_;  // per replica, per bucket: the last step it reduced
};

}  // namespace strata::detail

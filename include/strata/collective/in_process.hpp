/// \file
/// collective::InProcess — the ranks are threads of one process. Each rank publishes its
/// buffer pointers in a shared slot; after a barrier, rank r reduces chunk r of every
/// rank's buffer and writes the result into every rank's buffer (a fused reduce-scatter and
/// all-gather, no copy through a staging buffer, no lock on the data path); a second
/// barrier keeps buffers alive until all ranks are done. Barriers spin (long where every rank
/// has a core: detail/wait_policy.hpp), then back off to sleeping, and honour the group's
/// deadline and abort flag.
///
/// @code
/// strata::collective::InProcess::launch(4, [](strata::collective::InProcess& c) {
///   std::vector<float> g(1000, float(c.rank()));
///   c.allreduce(std::span(g), strata::ReduceOp::Sum);   // every element is 0+1+2+3
/// });
/// @endcode
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/collective/async.hpp>
#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/collective/detail/reduce.hpp>
#include <strata/collective/detail/wait_policy.hpp>
#include <strata/collective/flight_recorder.hpp>  // current_label: each call's site
#include <strata/collective/options.hpp>
#include <strata/collective/typed_front_end.hpp>
#include <strata/support/error.hpp>

namespace strata::collective {

namespace detail {

/// One rank's published state; a cache line each, so ranks do not false-share. The buffers
/// and fingerprint of consecutive collectives alternate between two entries, so a collective
/// that returns before the others are done reading (allreduce_or_share_raw) cannot overwrite what
/// they read: a rank is at most one collective ahead of the slowest.
struct alignas(64) RankSlot {
  std::atomic<std::uint64_t> arrived{0};  ///< the last barrier phase this rank reached
  const void* send_[2] = {nullptr, nullptr};
  void* recv_[2] = {nullptr, nullptr};
  Fingerprint fp_[2];
  char site_[2][kSiteBytes] = {};  ///< each call's site (FlightRecorder::current_label), for a mismatch's message
};

/// The state the threads of one group share.
class InProcessGroup {
 public:
  InProcessGroup(int size, Options o) : size_(size), options_(o), slots_(static_cast<std::size_t>(size)) {}
  int size() const noexcept { return size_; }
  const Options& options() const noexcept { return options_; }
  RankSlot& slot(int r) noexcept { return slots_[static_cast<std::size_t>(r)]; }

  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mu_);
      if (aborted_.load()) return;
      reason_ = reason;
    }
    aborted_.store(true, std::memory_order_release);
  }
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  /// Barrier state: arrivals since the group was made, and the last phase whose barrier
  /// completed, or kDead once one was cancelled. Completing and cancelling a phase are one
  /// compare-and-swap on `committed`, so either every rank passes the barrier or none does:
  /// no rank can leave (timeout, abort) while another is already reading its buffers.
  static constexpr std::uint64_t kDead = ~std::uint64_t{0};
  std::atomic<std::uint64_t> arrivals{0};
  std::atomic<std::uint64_t> committed{0};
  std::string reason() const {
    std::lock_guard lock(mu_);
    return reason_;
  }

 private:
  int size_;
  Options options_;
  std::vector<RankSlot> slots_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

}  // namespace detail

/// A rank of a group of threads.
class InProcess : public TypedFrontEnd<InProcess>, public AsyncOnCommThread<InProcess> {
 public:
  static constexpr const char* name = "in_process";

  /// The communicators of a new group of `size` ranks, one per thread that will use it.
  static std::vector<InProcess> make_group(int size, Options o = Options::from_env()) {
    STRATA_CHECK(size >= 1, "an InProcess group needs at least one rank, got ", size);
    auto g = std::make_shared<detail::InProcessGroup>(size, o);
    std::vector<InProcess> out;
    for (int r = 0; r < size; ++r) out.emplace_back(g, r);
    return out;
  }

  /// Runs fn(communicator) on `size` threads and rethrows the first failure; a failing rank
  /// aborts the group, so the others fail fast instead of waiting for it.
  template <class F>
  static void launch(int size, F&& fn, Options o = Options::from_env()) {
    auto comms = make_group(size, o);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          fn(comms[static_cast<std::size_t>(r)]);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          comms[static_cast<std::size_t>(r)].abort("rank " + std::to_string(r) + " failed: " + e.what());
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)  // the root cause first: a rank that failed on its own, not from the abort
      if (e) try {
          std::rethrow_exception(e);
        } catch (const collective_error&) {
        } catch (...) {
          throw;
        }
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  InProcess(std::shared_ptr<detail::InProcessGroup> g, int rank) : group_(std::move(g)), rank_(rank) {
    STRATA_CHECK(group_ && rank >= 0 && rank < group_->size(), "rank ", rank, " outside the group");
  }
  InProcess(InProcess&&) noexcept = default;
  InProcess& operator=(InProcess&&) = delete;
  ~InProcess() { stop_worker(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return group_->size(); }
  /// Collectives this rank has started (the sequence number of the next one).
  std::uint64_t sequence() const noexcept { return seq_; }

  // The typed overloads (allreduce, broadcast, allgather, reduce_scatter) come from TypedFrontEnd.
  void barrier() {
    before_blocking();
    begin(Fingerprint{OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0, 0}, nullptr, nullptr);
  }
  /// Fails every pending and later collective of the group, on every rank, with `reason`.
  void abort(const std::string& reason) { group_->abort(reason); }

  // ------------------------------------------------------------------ type-erased core
  void allreduce_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    const Fingerprint fp{OpKind::allreduce, op, dtype, count, 0, 0};
    begin(fp, in, out);
    reduce_own_share(count, dtype, op, [&](int k) { return group_->slot(k).recv_[cur_]; });
    end(fp);
  }
  /// An in-place all-reduce that, where `share()` says so, leaves rank r's `x` holding the
  /// reduction only in its share, elements [share_begin(count, r, n), share_begin(count, r + 1,
  /// n)), writes into no other rank's buffer, and returns without waiting for the others to
  /// finish reading `x`: the caller must then not write `x` again before every rank has passed
  /// a later barrier or collective of the group that follows its own call (the split update's
  /// barrier does, in GradientLayout::sharded). `share()` runs once every rank has arrived, so
  /// what it reads there (a word one rank wrote before arriving) is the same on every rank.
  /// Returns what it did.
  template <class Share>
  bool allreduce_or_share_raw(void* x, std::size_t count, DType dtype, ReduceOp op, Share&& share) {
    const Fingerprint fp{OpKind::allreduce, op, dtype, count, 0, 0};
    begin(fp, x, x);
    const bool shared = share();
    reduce_own_share(count, dtype, op,
                     [&](int k) -> void* { return shared ? (k == rank_ ? x : nullptr) : group_->slot(k).recv_[cur_]; });
    if (!shared) end(fp);
    return shared;
  }
  /// Whether the group was aborted (a rank failed, or a collective timed out).
  bool aborted() const noexcept { return group_->aborted(); }
  const Options& options() const noexcept { return group_->options(); }
  void broadcast_raw(void* x, std::size_t count, DType dtype, int root) {
    STRATA_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " outside [0, ", size(), ")");
    const Fingerprint fp{OpKind::broadcast, ReduceOp::Sum, dtype, count, root, 0};
    begin(fp, x, x);
    if (rank_ != root && count != 0) std::memcpy(x, group_->slot(root).recv_[cur_], count * size_of(dtype));
    end(fp);
  }
  void allgather_raw(const void* in, void* out, std::size_t count, DType dtype) {
    const Fingerprint fp{OpKind::allgather, ReduceOp::Sum, dtype, count, 0, 0};
    begin(fp, in, out);
    const std::size_t bytes = count * size_of(dtype);
    for (int k = 0; k < size(); ++k) {
      char* to = static_cast<char*>(out) + static_cast<std::size_t>(k) * bytes;
      if (bytes && to != group_->slot(k).send_[cur_]) std::memcpy(to, group_->slot(k).send_[cur_], bytes);  // (in place: there already)
    }
    end(fp);
  }
  void reduce_scatter_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    const Fingerprint fp{OpKind::reduce_scatter, op, dtype, count, 0, 0};
    begin(fp, in, out);
    const int n = size();
    detail::visit_collective_dtype(dtype, [&](auto s, auto a) {
      using S = decltype(s);
      using A = decltype(a);
      const std::size_t off = static_cast<std::size_t>(rank_) * count;
      S* mine = static_cast<S*>(out) - off;  // so that index off..off+count lands in `out`
      detail::reduce_across<S, A>(off, off + count, op, [&](int k) { return static_cast<const S*>(group_->slot(k).send_[cur_]); },
                         [&](int k) { return k == rank_ ? mine : nullptr; }, n);
    });
    end(fp);
  }

 private:
  /// This rank's share of the reduction over every rank's send buffer, written into recv(k)
  /// of each rank k where that is not null.
  template <class Recv>
  void reduce_own_share(std::size_t count, DType dtype, ReduceOp op, Recv&& recv) {
    const int n = size();
    const std::size_t lo = detail::share_begin(count, rank_, n), hi = detail::share_begin(count, rank_ + 1, n);
    detail::visit_collective_dtype(dtype, [&](auto s, auto a) {
      using S = decltype(s);
      using A = decltype(a);
      detail::reduce_across<S, A>(lo, hi, op, [&](int k) { return static_cast<const S*>(group_->slot(k).send_[cur_]); },
                         [&](int k) { return static_cast<S*>(recv(k)); }, n);
    });
  }


  /// Publishes this rank's buffers and waits for every rank to do the same.
  void begin(Fingerprint fp, const void* send, void* recv) {
    fp.seq = seq_++;
    cur_ = fp.seq & 1;
    auto& me = group_->slot(rank_);
    me.send_[cur_] = send;
    me.recv_[cur_] = recv;
    me.fp_[cur_] = fp;
    std::memcpy(me.site_[cur_], FlightRecorder::current_label(), kSiteBytes);
    // The fingerprints are compared on every call, debug mode or not: in shared memory it is
    // a few compares by the last rank in, and a count or dtype that differs would otherwise
    // read past another rank's buffer.
    arrive_and_wait(fp, true);
  }
  /// Waits until every rank has finished with every buffer of this collective.
  void end(const Fingerprint& fp) { arrive_and_wait(fp, false); }

  /// The first mismatch between rank 0's fingerprint and another rank's, or "".
  std::string fingerprint_mismatch() const {
    const Fingerprint& first = group_->slot(0).fp_[cur_];
    bool same = true;
    for (int k = 1; k < size() && same; ++k) same = group_->slot(k).fp_[cur_] == first;
    if (same) return {};  // (every call: no allocation unless they differ)
    std::vector<std::uint64_t> all(kCheckWords * static_cast<std::size_t>(size()));
    for (int k = 0; k < size(); ++k) {
      const auto& slot = group_->slot(k);
      pack_checked_call(slot.fp_[cur_], slot.site_[cur_], all.data() + kCheckWords * static_cast<std::size_t>(k));
    }
    return collective::fingerprint_mismatch(0, first, all.data(), size());
  }

  /// Cancels phase `phase` (if it is not complete yet) with `reason`; true if it is now dead.
  bool try_cancel(std::uint64_t phase, const std::string& reason) {
    std::uint64_t expect = phase - 1;
    group_->abort(reason);
    if (group_->committed.compare_exchange_strong(expect, detail::InProcessGroup::kDead, std::memory_order_acq_rel))
      return true;
    return expect == detail::InProcessGroup::kDead;
  }

  void arrive_and_wait(const Fingerprint& fp, bool check) {
    using Clock = std::chrono::steady_clock;
    constexpr auto kDead = detail::InProcessGroup::kDead;
    const std::uint64_t phase = ++phase_;
    const auto n = static_cast<std::uint64_t>(size());
    group_->slot(rank_).arrived.store(phase, std::memory_order_release);  // for diagnostics
    if (group_->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 == n * phase) {
      // The last rank in: complete the phase, unless the group was aborted or (debug mode)
      // the ranks called different collectives.
      std::string why = group_->aborted() ? group_->reason() : std::string();
      if (why.empty() && check) why = fingerprint_mismatch();
      std::uint64_t expect = phase - 1;
      const std::uint64_t to = why.empty() ? phase : kDead;
      if (!why.empty()) group_->abort(why);
      if (!group_->committed.compare_exchange_strong(expect, to, std::memory_order_acq_rel) || to == kDead)
        fail_aborted(fp);
      return;
    }
    const detail::WaitTimer waiting;
    // Spin first (a hand-off costs ~0.2 us): up to detail::long_spin_budget() where every rank
    // has a core (wait_policy.hpp), else briefly, since with fewer cores than ranks a spinning
    // rank starves the one it waits for. Then yield, then sleep.
    auto settled = [&] {
      const std::uint64_t c = group_->committed.load(std::memory_order_acquire);
      return c >= phase || group_->aborted();  // kDead is above every phase
    };
    detail::spin_wait(size(), 4096, settled);
    Clock::time_point deadline{};
    for (std::uint32_t polls = 0;; ++polls) {
      const std::uint64_t c = group_->committed.load(std::memory_order_acquire);
      if (c == kDead) fail_aborted(fp);
      if (c >= phase) return;
      if (group_->aborted() && try_cancel(phase, group_->reason())) fail_aborted(fp);
      if (deadline == Clock::time_point{}) deadline = Clock::now() + group_->options().timeout;
      if (polls < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (Clock::now() > deadline) {
        const std::string msg = timeout_message(fp, phase);
        if (try_cancel(phase, msg)) throw timeout_error(msg);
      }
    }
  }

  [[noreturn]] void fail_aborted(const Fingerprint& fp) {
    STRATA_THROW(collective_error, "strata.collective.aborted", fp.str(), " on rank ", rank_,
                 ": the group was aborted: ", group_->reason());
  }
  std::string timeout_message(const Fingerprint& fp, std::uint64_t phase) const {
    std::vector<int> missing;
    for (int k = 0; k < size(); ++k)
      if (group_->slot(k).arrived.load(std::memory_order_acquire) < phase) missing.push_back(k);
    std::ostringstream os;
    os << strata::detail::error_text("strata.collective.timeout") << fp.str() << " on rank " << rank_ << ": rank"
       << (missing.size() == 1 ? "" : "s");
    for (std::size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : " ") << missing[i];
    os << (missing.size() == 1 ? " has" : " have") << " not arrived within "
       << std::chrono::duration<double>(group_->options().timeout).count() << " s";
    return os.str();
  }

  friend class TypedFrontEnd<InProcess>;
  friend class AsyncOnCommThread<InProcess>;
  detail::AsyncWorker& comm_thread() noexcept { return worker_; }
  void before_blocking() { worker_.drain(); }
  void stop_worker() { worker_.stop(); }

  std::shared_ptr<detail::InProcessGroup> group_;
  int rank_ = 0;
  std::uint64_t seq_ = 0, phase_ = 0;
  unsigned cur_ = 0;  // the slot entries of the collective in progress (its sequence number's parity)
  // Jobs hold `this`: a communicator is not moved while it has asynchronous work in flight.
  detail::AsyncWorker worker_;
};

}  // namespace strata::collective

template <>
inline constexpr bool strata::enable_collective<strata::collective::InProcess> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<strata::collective::InProcess> = true;
template <>
inline constexpr bool strata::collective::enable_thread_group<strata::collective::InProcess> = true;

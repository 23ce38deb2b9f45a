/// \file
/// ps::EpochRange<S, T>: the range ParameterServerStrategy<C, Mode>::distribute() returns, over
/// transport T (the strategy, S, is its friend: a server serves the epoch from begin(), a
/// worker reports each finished batch and the epoch's end to the servers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <strata/data/pipeline.hpp>
#include <strata/strategy/distributed_pipeline.hpp>
#include <strata/strategy/input_context.hpp>  // Inputs, UnevenInputs
#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/support/check.hpp>

namespace strata::ps {

/// The range distribute() returns: on a worker the epoch's batches
/// (its own, per-worker ones with their sizes exchanged, or dispatched ones from the first
/// server); on a server, begin() serves the whole epoch and the range is then at its end.
template <class S, class T>
class EpochRange {
  using PerWorker = DistributedPipeline<std::remove_cvref_t<decltype(std::declval<T&>().group())>>;

 public:
  struct Sentinel {};
  class Iterator {
   public:
    using value_type = data::Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(S* s, data::Pipeline::Iterator it) : s_(s), it_(std::move(it)) {
      if (at_end()) close();
    }
    Iterator(S* s, typename PerWorker::Iterator it)
        : s_(s), sized_(std::move(it)), per_worker_(true) {
      if (at_end()) close();
    }
    // Dispatched batches: each step's from the first server.
    Iterator(S* s, data::Pipeline::Batches batches) : s_(s), batches_(std::move(batches)) {
      s_->worker_->begin_batches();
      fetch(Dispatcher::kNone);
    }
    Iterator(Iterator&& o) noexcept
        : s_(std::exchange(o.s_, nullptr)), it_(std::move(o.it_)), sized_(std::move(o.sized_)),
          per_worker_(o.per_worker_), batches_(std::move(o.batches_)), held_(o.held_),
          dispatched_batch_(std::move(o.dispatched_batch_)) {}
    Iterator& operator=(Iterator&&) = delete;
    ~Iterator() {
      // Left early (break, an exception): the servers must still hear that this worker is done.
      if (s_ && std::uncaught_exceptions() == 0) close();
    }
    const data::Batch& operator*() const noexcept {
      return batches_ ? dispatched_batch_ : per_worker_ ? *sized_ : *it_;
    }
    const data::Batch* operator->() const noexcept { return &**this; }
    Iterator& operator++() {
      if (batches_) {
        fetch(held_);
        return *this;
      }
      if (per_worker_)
        ++sized_;
      else
        ++it_;
      if (at_end()) close();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& i, Sentinel) noexcept { return i.s_ == nullptr; }

   private:
    bool at_end() const { return per_worker_ ? sized_ == typename PerWorker::Sentinel{} : it_ == data::Pipeline::Sentinel{}; }
    void close() { std::exchange(s_, nullptr)->finish_epoch(); }
    // Reports the batch held as finished (its pushes are answered) and takes the next.
    void fetch(std::int64_t finished) {
      held_ = s_->worker_->next_batch(finished);
      if (held_ == Dispatcher::kNone)
        close();
      else
        dispatched_batch_ = batches_->batch(held_);
    }
    S* s_ = nullptr;
    data::Pipeline::Iterator it_;
    typename PerWorker::Iterator sized_;  // per-worker input under Sync: sizes exchanged each step
    bool per_worker_ = false;
    std::optional<data::Pipeline::Batches> batches_;  // dispatched batches: the epoch's, by number
    std::int64_t held_ = Dispatcher::kNone;
    data::Batch dispatched_batch_;
  };

  EpochRange(S& s, data::Pipeline p, bool dispatched = false)
      : s_(&s), p_(std::move(p)), dispatched_(dispatched) {}
  /// A worker: the epoch's first batch. A server: serves the whole epoch, then is at the end.
  Iterator begin() {
    if (s_->server_) {
      s_->server_->serve_epoch(dispatched_ ? p_.num_batches() : -1);
      s_->publish_values();
      return Iterator();
    }
    STRATA_CHECK(!s_->joined() || s_->first_epoch_ >= 0, "S: a worker that joined the running "
                 "job starts its loop at strategy.first_epoch() (the job's epoch), which also gives it the current values");
    s_->in_epoch_ = true;
    if (s_->o_.remote_tables) s_->worker_->attach_remote_tables();
    if (dispatched_) return Iterator(s_, p_.begin_batches());
    if (sized_) return Iterator(s_, sized_->begin());
    return Iterator(s_, p_.begin());
  }
  Sentinel end() const noexcept { return {}; }
  /// Batches per epoch of one worker (dispatched batches: the epoch's over the workers, as
  /// many as each takes when all run at one speed).
  std::int64_t num_batches() const noexcept {
    if (dispatched_) return (p_.num_batches() + s_->num_workers() - 1) / s_->num_workers();
    return p_.num_batches();
  }
  /// Per-worker input under Sync: the workers exchange their batch sizes every step.
  void exchange_sizes(UnevenInputs uneven) {
    if (!s_->server_) sized_.emplace(p_, s_->t_.group(), Inputs::per_worker, uneven);
  }

 private:
  S* s_;
  data::Pipeline p_;
  bool dispatched_ = false;
  std::optional<PerWorker> sized_;
};

}  // namespace strata::ps

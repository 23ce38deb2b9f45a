/// \file
/// ps::server::BatchAnswers<T>: the first server's side of dispatched batches — a Dispatcher
/// for the epoch, each worker's request answered with its next batch, a worker's batches
/// handed on when it leaves or is lost, and the answers' sends completed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>  // the tags
#include <strata/support/error.hpp>

namespace strata::ps::server {

/// What the first server's Dispatcher did in the last epoch that dispatched its batches.
struct DispatchStats {
  std::int64_t batches = 0, completed = 0, repeated = 0, redispatched = 0;
};

template <class T>
class BatchAnswers {
 public:
  explicit BatchAnswers(State<T>& st) : st_(st) {}

  /// The epoch's `batches` are handed out here (the first server, an epoch of dispatched batches).
  void begin_epoch(std::int64_t batches) { dispatcher_.emplace(batches, st_.lost); }

  /// Worker w's kBatchTag: the batch it finished, answered with its next.
  void on_request(int w, typename T::Message& m) {
    std::int64_t finished_batch = Dispatcher::kNone;
    STRATA_REQUIRE(dispatcher_.has_value() && m.bytes == sizeof finished_batch, invalid_argument, "strata.ps",
                   "server rank ", st_.t.rank(), ": worker rank ", m.source,
                   " asked for a batch, but this server does not hand out this epoch's batches");
    st_.t.receive(m, &finished_batch);
    answer(dispatcher_->request(w, finished_batch));
  }

  /// Worker w left the epoch early, or was lost: what it held goes to the others.
  void leave(int w) {
    if (dispatcher_) answer(dispatcher_->leave(w));
  }
  void lost(int w) {
    if (dispatcher_) answer(dispatcher_->lost(w));
  }
  void admit() {
    if (dispatcher_) dispatcher_->admit();
  }

  /// The epoch's end: its figures kept, the answers in flight completed.
  void end_epoch() {
    if (!dispatcher_) return;
    stats_ = {dispatcher_->batches(), dispatcher_->completed(), dispatcher_->repeated(), dispatcher_->redispatched()};
    complete();
    dispatcher_.reset();
  }

  const DispatchStats& stats() const noexcept { return stats_; }

 private:
  // Sends each answer of the Dispatcher to its worker (one lost meanwhile fails its send,
  // tolerated: the loss is handled where the transport reports it).
  void answer(const std::vector<Dispatcher::Answer>& answers) {
    for (const Dispatcher::Answer& a : answers) {
      values_.push_back(a.batch);  // a deque: the bytes stay put until the send completes
      sends_.push_back(st_.t.isend(&values_.back(), sizeof(std::int64_t),
                                   st_.t.roles().workers[static_cast<std::size_t>(a.worker)], kBatchReplyTag));
      send_to_.push_back(a.worker);
    }
    if (sends_.size() > 64) complete();  // the workers posted their receives first
  }

  // Completes the answers in flight, but for those to workers lost meanwhile: a send to a
  // peer that died before it said it was ready to receive may never complete.
  void complete() {
    for (std::size_t k = 0; k < sends_.size(); ++k)
      if (!st_.lost[static_cast<std::size_t>(send_to_[k])])
        st_.t.wait_all(std::span(&sends_[k], 1), std::chrono::steady_clock::now() + st_.t.timeout(),
                       [](const std::string&) {});
    sends_.clear();
    send_to_.clear();
    values_.clear();
  }

  State<T>& st_;
  std::optional<Dispatcher> dispatcher_;
  std::deque<std::int64_t> values_;
  std::vector<typename T::Request> sends_;
  std::vector<int> send_to_;  // the worker of each
  DispatchStats stats_;
};

}  // namespace strata::ps::server

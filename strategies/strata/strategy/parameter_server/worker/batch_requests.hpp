/// \file
/// ps::worker::BatchRequests<T>: a worker's side of dispatched batches (Async; ps::Dispatcher
/// on the first server). Two requests are always in flight: the answer to the older one is
/// the batch trained next, the newer one is answered meanwhile. Each reports the batch
/// finished just before it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>

#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/strategy/parameter_server/shards.hpp>  // the tags
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>

namespace strata::ps::worker {

template <class T>
class BatchRequests {
 public:
  explicit BatchRequests(T& t) : t_(t) {}

  /// The epoch's first two requests.
  void begin() {
    STRATA_CHECK(asks_.empty(), "begin_batches: the previous epoch's requests are still in flight");
    ask(Dispatcher::kNone);
    ask(Dispatcher::kNone);
  }
  /// Reports `finished` (kNone: none), then returns the next batch to train, or kNone once the
  /// epoch is complete (every request answered by then).
  std::int64_t next(std::int64_t finished) {
    if (finished != Dispatcher::kNone) ask(finished);
    std::int64_t b = take_answer();
    if (b == Dispatcher::kNone) drain();
    return b;
  }
  /// Waits for every request still in flight (a loop left early: the first server answers
  /// them once it hears this worker is done).
  void drain() {
    while (!asks_.empty()) take_answer();
  }

 private:
  // One request for a batch: the finished batch it reports, the answer, and their messages.
  struct Ask {
    std::int64_t finished = Dispatcher::kNone, answer = Dispatcher::kNone;
    typename T::Request recv, send;
  };
  void ask(std::int64_t finished) {
    const int server = t_.roles().servers.front();
    Ask& a = asks_.emplace_back();  // a deque: its bytes stay put while the messages are in flight
    a.finished = finished;
    a.recv = t_.irecv(&a.answer, sizeof a.answer, server, kBatchReplyTag);
    a.send = t_.isend(&a.finished, sizeof a.finished, server, kBatchTag);
  }
  std::int64_t take_answer() {
    Ask& a = asks_.front();
    typename T::Request both[2] = {a.send, a.recv};
    const auto deadline = std::chrono::steady_clock::now() + t_.timeout() + t_.timeout() / 4 + std::chrono::seconds(1);
    t_.wait_all(std::span(both), deadline, [&](const std::string& why) {
      t_.abort(strata::detail::error_text("strata.ps.timeout", "worker rank ", t_.rank(), ": the next batch from server "
                                          "rank ", t_.roles().servers.front(), " did not come (", why, "); aborting the job"));
    });
    const std::int64_t b = a.answer;
    asks_.pop_front();
    return b;
  }

  T& t_;
  std::deque<Ask> asks_;
};

}  // namespace strata::ps::worker

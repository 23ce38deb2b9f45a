/// \file
/// ps::Dispatcher: an Async epoch's batches handed out one at a time by the first server (TF's
/// ClusterCoordinator dispatches its closures the same way), so that a lost worker's batches go
/// to the others and a slow worker takes fewer. Pure state; the server passes the requests in.
///
/// A worker keeps two requests in flight: one answered with the batch it trains next, one
/// being answered meanwhile. Each request reports the batch the worker has just finished (its
/// pushes answered), so the dispatcher knows at every moment which batches each worker holds:
/// a lost worker's held batches go back to the front of the queue. Every batch of the epoch is
/// thus completed by some worker; only a lost worker's last batch can be trained twice (it had
/// pushed it, but its replies or its report had not arrived). When nothing is left to hand out, a request waits while
/// any live worker still holds a batch (it may yet be lost), and is answered "none" (-1) once
/// none does: the epoch is complete.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::ps {

class Dispatcher {
 public:
  /// Answered when nothing is left: the worker's epoch is over.
  static constexpr std::int64_t kNone = -1;

  /// An epoch of `batches` batches for `workers` workers (`lost`: those already gone).
  Dispatcher(std::int64_t batches, std::vector<char> lost)
      : batches_(batches), lost_(std::move(lost)), held_(lost_.size()), waiting_(lost_.size(), 0),
        done_(static_cast<std::size_t>(batches), 0) {
    STRATA_CHECK(batches >= 0, "Dispatcher: an epoch of ", batches, " batches");
  }

  /// Worker w asks for a batch, having finished `done` (kNone: none). Returns the batches
  /// answered now, in order, to whichever workers they go to (`answers`: worker, batch).
  struct Answer {
    int worker;
    std::int64_t batch;
  };
  std::vector<Answer> request(int w, std::int64_t done) {
    check_worker(w);
    if (lost_[static_cast<std::size_t>(w)]) return {};
    if (done != kNone) finish(w, done);
    ++waiting_[static_cast<std::size_t>(w)];
    return serve();
  }

  /// Worker w left the epoch early (a loop it broke out of): its waiting requests are
  /// answered kNone, and what it held goes to the others.
  std::vector<Answer> leave(int w) {
    check_worker(w);
    const auto i = static_cast<std::size_t>(w);
    std::vector<Answer> out;
    if (lost_[i]) return out;
    for (; waiting_[i] > 0; --waiting_[i]) out.push_back({w, kNone});
    auto more = lost(w);
    out.insert(out.end(), more.begin(), more.end());
    return out;
  }

  /// Worker w is gone: what it held goes back to the queue, for the others.
  std::vector<Answer> lost(int w) {
    check_worker(w);
    const auto i = static_cast<std::size_t>(w);
    if (lost_[i]) return {};
    lost_[i] = 1;
    waiting_[i] = 0;
    for (auto it = held_[i].rbegin(); it != held_[i].rend(); ++it) {
      queue_.push_front(*it);
      ++redispatched_;
    }
    held_[i].clear();
    return serve();
  }

  /// A worker that joined: a slot of its own, the next index; it takes batches from the same
  /// queue as the others.
  int admit() {
    lost_.push_back(0);
    held_.emplace_back();
    waiting_.push_back(0);
    return static_cast<int>(lost_.size()) - 1;
  }

  std::int64_t batches() const noexcept { return batches_; }
  /// Batches finished (each once), and those finished again (a lost worker's last push).
  std::int64_t completed() const noexcept { return completed_; }
  std::int64_t repeated() const noexcept { return repeated_; }
  /// Batches handed out again after their worker was lost.
  std::int64_t redispatched() const noexcept { return redispatched_; }
  /// Every batch finished and none held: the epoch's data is all trained.
  bool complete() const noexcept { return completed_ == batches_; }

 private:
  void check_worker(int w) const {
    STRATA_CHECK(w >= 0 && static_cast<std::size_t>(w) < lost_.size(), "Dispatcher: worker ", w, " of ", lost_.size());
  }
  void finish(int w, std::int64_t b) {
    auto& mine = held_[static_cast<std::size_t>(w)];
    std::size_t k = 0;
    while (k < mine.size() && mine[k] != b) ++k;
    STRATA_REQUIRE(k < mine.size(), invalid_argument, "strata.ps", "worker ", w, " reports batch ", b,
                   " finished, which it was not given");
    mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
    char& d = done_[static_cast<std::size_t>(b)];
    if (d) {
      ++repeated_;
    } else {
      d = 1;
      ++completed_;
    }
  }
  bool anyone_holds() const {
    for (std::size_t i = 0; i < held_.size(); ++i)
      if (!lost_[i] && !held_[i].empty()) return true;
    return false;
  }
  // Answers the waiting requests, oldest worker first, while there is something to answer.
  std::vector<Answer> serve() {
    std::vector<Answer> out;
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t i = 0; i < waiting_.size(); ++i) {
        if (waiting_[i] == 0 || lost_[i]) continue;
        std::int64_t b = kNone;
        if (!queue_.empty()) {
          b = queue_.front();
          queue_.pop_front();
        } else if (next_ < batches_) {
          b = next_++;
        } else if (anyone_holds()) {
          continue;  // a holder may yet be lost: its batches would come back
        }
        --waiting_[i];
        if (b != kNone) held_[i].push_back(b);
        out.push_back({static_cast<int>(i), b});
        progress = true;
      }
    }
    return out;
  }

  std::int64_t batches_, next_ = 0, completed_ = 0, repeated_ = 0, redispatched_ = 0;
  std::vector<char> lost_;
  std::vector<std::vector<std::int64_t>> held_;
  std::vector<int> waiting_;
  std::deque<std::int64_t> queue_;
  std::vector<char> done_;
};

}  // namespace strata::ps

/// \file
/// ps::server::Membership<T>: the workers of an Async job coming and going — a joiner admitted
/// and caught up at the epoch it names (or refused past max_workers), a worker lost taken out
/// (the job ends below min_workers; Sync cannot go on without any worker), and the end of an
/// epoch a joiner reports after this server had ended it. docs/parameter_server.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>     // the tags
#include <strata/strategy/parameter_server/transport.hpp>  // AdmitsWorkers
#include <strata/support/error.hpp>

namespace strata::ps::server {

/// The first server's answer to a joiner's kCatchUpTag when the job has max_workers already.
inline constexpr std::int64_t kRefused = -2;

template <class T>
class Membership {
 public:
  explicit Membership(State<T>& st) : st_(st) {}

  /// At an epoch's start: every worker's place in the table.
  void begin_epoch() {
    st_.ensure_workers_table();
    stale_done_.resize(static_cast<std::size_t>(st_.workers), 0);
  }

  /// A worker that joined (kWorkerJoinedTag): the transport's and this server's state grow by
  /// one worker, which takes part from the epoch it names (catch_up).
  void admit(int r) {
    STRATA_REQUIRE(!st_.s.sync, invalid_argument, "strata.ps", "server rank ", st_.t.rank(), ": worker rank ", r,
                   " joined a Sync job, whose steps wait for a fixed set of workers");
    st_.ensure_workers_table();
    if constexpr (AdmitsWorkers<T>)
      st_.t.admit(r);
    else
      st_.t.abort(strata::detail::error_text("strata.ps", "server rank ", st_.t.rank(), ": this transport admits no workers"));
    ++st_.workers;
    st_.lost.push_back(0);
    st_.starts_at.push_back(-1);
    stale_done_.resize(static_cast<std::size_t>(st_.workers), 0);
    if (!st_.running.empty()) st_.running.push_back(0);
    for (Held<T>& h : st_.held) {
      h.clock.push_back(0);
      if (!h.rows) continue;
      h.row_pushes.emplace_back();
      if (st_.s.remote_tables) h.lookups.emplace_back();
      h.worker_replies.emplace_back();
      h.dirty.emplace_back();
      h.dirty_rows.emplace_back();
    }
    std::fprintf(stderr, "[strata.ps] server rank %d: worker rank %d joined; %ld workers\n", st_.t.rank(), r,
                 static_cast<long>(std::count(st_.lost.begin(), st_.lost.end(), 0)));
    std::fflush(stderr);
  }

  /// Worker w, which joined, names the epoch it joins at (the first server's, which the
  /// first server decides: its own), and takes the values held here. Returns 1 when w is
  /// thereby counted as finished with this epoch (it joins at the next, or was refused).
  int catch_up(int w, typename T::Message& m, std::vector<char>& done) {
    const auto i = static_cast<std::size_t>(w);
    double named = -1;
    st_.t.receive(m, &named);
    STRATA_REQUIRE(st_.starts_at[i] == -1, invalid_argument, "strata.ps", "server rank ", st_.t.rank(), ": worker rank ",
                   m.source, " caught up twice");
    const std::int64_t e = st_.me == 0 ? st_.epoch : static_cast<std::int64_t>(named);
    const auto live = std::count(st_.lost.begin(), st_.lost.end(), 0);  // the joiner among them
    if (st_.me == 0 && st_.s.max_workers > 0 && live > st_.s.max_workers) return refuse(i, m.source, done);  // the first server decides
    int counted = 0;
    if (e == st_.epoch) {  // in this epoch
      st_.starts_at[i] = e;
    } else if (e == st_.epoch + 1) {  // in the next: this one may end without it
      st_.starts_at[i] = e;
      done[i] = 1;
      counted = 1;
    } else if (e == st_.epoch - 1) {  // in the one this server ended before it joined: its end is stale here
      st_.starts_at[i] = st_.epoch;
      stale_done_[i] = 1;
    } else {
      st_.t.abort(strata::detail::error_text("strata.ps", "server rank ", st_.t.rank(), ": worker rank ", m.source,
                                             " joins at epoch ", e, ", this server serves epoch ", st_.epoch,
                                             "; aborting the job"));
    }
    if (!st_.running.empty()) st_.running[i] = !done[i];
    answer_catch_up(e, m.source);
    st_.send_values_to(m.source);
    return counted;
  }

  /// Async: takes worker rank `r` out of the table (the caller then drops what waits for it);
  /// Sync cannot complete a step without it, nor Async below min_workers: the job ends.
  /// False when it was out already.
  bool take_out(int r) {
    const std::size_t i = st_.worker_index(r);
    if (st_.s.sync)
      st_.t.abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", st_.t.rank(), ": worker rank ", r,
                                             " is gone; a Sync step cannot complete without it; aborting the job"));
    if (st_.lost[i]) return false;
    st_.lost[i] = 1;
    if (!st_.running.empty()) st_.running[i] = 0;
    const auto live = std::count(st_.lost.begin(), st_.lost.end(), 0);
    if (live < st_.s.min_workers) {
      std::string left;
      for (std::size_t k = 0; k < st_.lost.size(); ++k)
        if (!st_.lost[k]) left += (left.empty() ? "" : ", ") + std::to_string(st_.t.roles().workers[k]);
      st_.t.abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", st_.t.rank(), ": worker rank ", r,
                                             " is gone; ", live, " worker", live == 1 ? "" : "s",
                                             " left, below min_workers=", st_.s.min_workers, ": left [", left,
                                             "]; aborting the job"));
    }
    std::fprintf(stderr, "[strata.ps.peer_lost] server rank %d: worker rank %d is gone; Async carries on with %ld worker%s\n",
                 st_.t.rank(), r, static_cast<long>(live), live == 1 ? "" : "s");
    std::fflush(stderr);
    return true;
  }

  /// Worker w's kDoneTag ends an epoch this server had ended before w named its epoch: true
  /// (once), and w gets the values instead.
  bool stale_done(int w, int rank) {
    if (!stale_done_[static_cast<std::size_t>(w)]) return false;
    stale_done_[static_cast<std::size_t>(w)] = 0;
    st_.send_values_to(rank);
    return true;
  }

 private:
  int refuse(std::size_t i, int rank, std::vector<char>& done) {
    std::fprintf(stderr, "[strata.ps] server rank %d: worker rank %d refused: the job has max_workers=%d workers\n",
                 st_.t.rank(), rank, st_.s.max_workers);
    std::fflush(stderr);
    st_.lost[i] = 1;  // not counted, sent nothing more; its link closes as it ends
    done[i] = 1;
    answer_catch_up(kRefused, rank);
    return 1;
  }

  void answer_catch_up(std::int64_t answer, int rank) {
    std::int64_t& reply = catch_up_replies_.emplace_back(answer);  // a deque: the bytes stay put
    auto r = st_.t.isend(&reply, sizeof reply, rank, kCatchUpReplyTag);
    st_.t.wait_all(std::span(&r, 1), std::chrono::steady_clock::now() + st_.t.timeout(), [](const std::string&) {});
  }

  State<T>& st_;
  std::vector<char> stale_done_;  // a joiner's next kDoneTag ends an epoch this server had ended
  std::deque<std::int64_t> catch_up_replies_;
};

}  // namespace strata::ps::server

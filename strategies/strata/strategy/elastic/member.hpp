/// \file
/// strata::elastic::Member: this process's place in the membership that strata-run --elastic
/// serves (docs/design/elastic.md): the view, its rank, the communicators' prefix, the check
/// at each step boundary, the report of a member that does not answer, and the wait for the
/// next generation. elastic::Trainer (trainer.hpp) runs the loop over it.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/runtime/membership.hpp>
#include <strata/runtime/process.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/support/check.hpp>
#include <strata/support/environment.hpp>

namespace strata::elastic {

/// This process's membership in an elastic job.
class Member {
 public:
  /// Joins the job that strata-run --elastic started this process in (STRATA_ELASTIC), and
  /// waits (up to `timeout`) for the first view that holds it.
  explicit Member(std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : info_(runtime::detect_process()), timeout_(timeout) {
    STRATA_REQUIRE(environment::get("STRATA_ELASTIC") != nullptr, invalid_argument, "strata.elastic",
                   "this process is not part of an elastic job: start it with strata-run --elastic MIN:MAX");
    store_ = &runtime::TcpStore::instance(info_.master_addr, info_.master_port, info_.rank, timeout);
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    id_ = std::string(host) + ":" + std::to_string(::getpid());
    accept(store_->join(id_, timeout_));
  }

  const runtime::View& view() const noexcept { return view_; }
  std::uint64_t generation() const noexcept { return view_.generation; }
  int rank() const { return view_.rank_of(id_); }
  int size() const { return view_.size(); }
  const std::string& id() const noexcept { return id_; }
  /// Whether this process took part in an earlier generation (false for a joiner's first).
  bool has_state() const noexcept { return trained_; }
  /// The prefix of this generation's communicators: an old generation's keys never mix in.
  std::string prefix() const { return "g" + std::to_string(view_.generation); }
  /// This process as a rank of this generation's view, for a collective's constructor.
  runtime::ProcessInfo process() const {
    runtime::ProcessInfo p = info_;
    p.rank = rank();
    p.world_size = size();
    p.local_rank = p.rank;
    p.local_size = p.world_size;
    p.launcher = "env";
    p.rendezvous_dir.clear();
    return p;
  }

  /// At a step boundary, called by every rank of the generation: whether a newer generation
  /// is out. Member 0 asks the store (one round trip) and the ranks add up its answer (one
  /// small all-reduce through `strategy`), so all of them leave the generation at the same
  /// step: a rank that saw the change one step later than another would wait in that step's
  /// all-reduce for peers that had already left.
  template <class S>
  bool changed(S& strategy) {
    double seen = 0;
    if (rank() == 0) {
      const runtime::View v = store_->poll_view(id_, view_.generation);
      check(v);
      seen = static_cast<double>(v.generation);
    }
    strategy.sum_across_processes(std::span<double>(&seen, 1));
    return seen > static_cast<double>(view_.generation);
  }

  /// Waits for the next generation's view (after changed(), or after a collective failed
  /// because a peer was lost). Throws, with the reason, when the job ended or this process
  /// was dropped.
  void next() {
    trained_ = true;
    accept(store_->wait_view(id_, view_.generation, timeout_));
  }

  /// Why this generation is over, or empty while it is current: a newer view is out, the job
  /// ended, or this process was dropped (one round trip to the store). What a communicator's
  /// rendezvous asks while it waits (collective::Options::rendezvous_abandoned).
  std::string superseded() {
    const runtime::View v = store_->poll_view(id_, view_.generation);
    if (v.state != runtime::View::State::member) return v.reason();
    if (v.generation > view_.generation) return "generation " + std::to_string(v.generation) + " replaced generation " + std::to_string(view_.generation);
    return {};
  }

  /// After a collective of this generation failed (a peer lost, or one that does not
  /// answer): the census of who still answers. This rank says through the store that it
  /// does; once the store has published a newer view (a lost member's lease ended), that view
  /// settles it; else the members that have not said so within `window` (stopped, or hung)
  /// are reported to the store, which drops them from the next view and fences them out.
  /// Returns whether a new view is coming: false when every member answers and none is lost,
  /// a failure the membership cannot mend.
  bool census(std::chrono::milliseconds window = kCensusWindow) {
    const std::string at = prefix() + "/answering/";
    store_->set(at + id_, {'1'});
    std::vector<std::string> silent;
    const auto until = std::chrono::steady_clock::now() + window;
    for (;;) {
      const runtime::View v = store_->poll_view(id_, view_.generation);
      check(v);
      if (v.generation > view_.generation) return true;
      silent.clear();
      for (const std::string& m : view_.members)
        if (m != id_ && !store_->check(at + m)) silent.push_back(m);
      if (silent.empty()) return false;
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The store decides: a report from a member it has dropped is refused, and next() says so.
    for (const std::string& m : silent)
      if (const runtime::View v = store_->evict(id_, view_.generation, m); v.state == runtime::View::State::ended) check(v);
    return true;
  }

  /// How long census() waits for the others to say they answer: every rank waiting in the
  /// failed collective timed out within about a step of the first one.
  static constexpr std::chrono::milliseconds kCensusWindow{1000};

 private:
  void check(const runtime::View& v) const {
    if (v.state == runtime::View::State::ended)
      STRATA_THROW(collective_error, "strata.elastic.ended", v.reason());
    if (v.state == runtime::View::State::refused)
      STRATA_THROW(collective_error, "strata.elastic.dropped", "this process (", id_, ") may not go on: ", v.reason());
  }
  void accept(runtime::View v) {
    check(v);
    STRATA_REQUIRE(v.rank_of(id_) >= 0, collective_error, "strata.elastic", "the view of generation ", v.generation,
                   " does not hold this process (", id_, ")");
    view_ = std::move(v);
  }

  runtime::ProcessInfo info_;
  std::chrono::milliseconds timeout_;
  runtime::TcpStore* store_ = nullptr;
  std::string id_;
  runtime::View view_;
  bool trained_ = false;
};

}  // namespace strata::elastic

/// \file
/// The worker's side of an elastic job (docs/elastic_design.md): strata::elastic::Member is
/// this process's place in the membership that strata-run --elastic serves, and
/// strata::elastic::GlobalOrder cuts each epoch by global example offset, so that a change of
/// membership mid-epoch still sees every example once.
///
/// A generation's loop: build the collective from member.process() under member.prefix(),
/// take the training state from the view's member 0 (a survivor), train; at each step
/// boundary member.changed(strategy) (member 0 asks the store, the ranks agree); on a change,
/// or a collective that fails
/// because a peer is lost, member.next() waits for the next view.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <strata/runtime/membership.hpp>
#include <strata/runtime/process.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/support/check.hpp>

namespace strata::elastic {

/// This process's membership in an elastic job.
class Member {
 public:
  /// Joins the job that strata-run --elastic started this process in (STRATA_ELASTIC), and
  /// waits (up to `timeout`) for the first view that holds it.
  explicit Member(std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : info_(runtime::detect_process()), timeout_(timeout) {
    STRATA_REQUIRE(std::getenv("STRATA_ELASTIC") != nullptr, invalid_argument, "strata.elastic",
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

/// Each epoch's order of the examples (a permutation drawn from the seed and the epoch, the
/// same on every process) and the global offset reached in it. A step of n ranks with b rows
/// each takes the next n·b examples of the order, rank r the r-th b of them; the epoch's last
/// step shares what is left in rank order. The offset, not the rank, says where a worker
/// reads, so after a change of membership the remaining examples are shared by the new view.
class GlobalOrder {
 public:
  GlobalOrder(std::int64_t examples, std::uint64_t seed) : n_(examples), seed_(seed) {
    STRATA_CHECK(examples > 0, "GlobalOrder: an epoch of ", examples, " examples");
    draw();
  }

  std::int64_t epoch() const noexcept { return epoch_; }
  std::int64_t offset() const noexcept { return offset_; }
  /// Moves to (epoch, offset), e.g. the position a survivor's state holds.
  void seek(std::int64_t epoch, std::int64_t offset) {
    STRATA_CHECK(offset >= 0 && offset <= n_ && epoch >= 0, "GlobalOrder: position ", epoch, ":", offset, " outside an epoch of ", n_);
    if (epoch != epoch_) {
      epoch_ = epoch;
      draw();
    }
    offset_ = offset;
  }

  /// This rank's example indices of the next step, without moving: rank r takes rows
  /// [offset + r·b, offset + (r+1)·b) of the order, cut at the epoch's end.
  std::vector<std::int64_t> rows(int rank, std::int64_t per_rank) const {
    const std::int64_t lo = std::min(n_, offset_ + rank * per_rank), hi = std::min(n_, lo + per_rank);
    return std::vector<std::int64_t>(order_.begin() + lo, order_.begin() + hi);
  }
  /// The examples the next step takes in all (n·b, or what is left of the epoch).
  std::int64_t step_rows(int ranks, std::int64_t per_rank) const { return std::min<std::int64_t>(n_ - offset_, ranks * per_rank); }
  /// After a step: moves past its rows; at the epoch's end, to the next epoch's start.
  void advance(int ranks, std::int64_t per_rank) {
    offset_ += step_rows(ranks, per_rank);
    if (offset_ >= n_) seek(epoch_ + 1, 0);
  }

 private:
  void draw() {
    order_.resize(static_cast<std::size_t>(n_));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    std::mt19937_64 g(seed_ * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch_));
    std::shuffle(order_.begin(), order_.end(), g);
  }

  std::int64_t n_;
  std::uint64_t seed_;
  std::int64_t epoch_ = 0, offset_ = 0;
  std::vector<std::int64_t> order_;
};

}  // namespace strata::elastic

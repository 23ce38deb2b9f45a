/// \file
/// strata::elastic::GlobalOrder: each epoch of an elastic job cut by global example offset, so
/// that a change of membership mid-epoch still sees every example once (docs/elastic.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::elastic {

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

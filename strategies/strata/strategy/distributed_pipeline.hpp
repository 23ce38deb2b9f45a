/// \file
/// DistributedPipeline<C>: a worker's input under MultiWorkerMirroredStrategy, with the
/// workers agreeing on how many steps there are, so that a worker that runs out of data first
/// never leaves the others waiting in an all-reduce (RELIABILITY D2).
///
///   Inputs::split       every worker holds the same dataset and takes its rows of each global
///                       batch (Pipeline::split); each epoch starts by checking that all
///                       workers have the same dataset size and number of batches, and fails
///                       on every worker, naming the counts, if not.
///   Inputs::per_worker  each worker brings its own pipeline (already sharded), batched per
///                       replica. Every step the workers exchange their batch sizes (one small
///                       allgather), so Batch::global_size is the true total, and when one runs
///                       out: UnevenInputs::error fails every worker at once, naming who ran
///                       out; UnevenInputs::join lets it take part with empty batches (zero
///                       gradients) until every worker is done (DDP's Join).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/support/check.hpp>

namespace strata {

/// How a worker's input relates to the others' (see DistributedPipeline).
enum class Inputs { split, per_worker };
/// What happens when per-worker inputs run out at different steps.
enum class UnevenInputs { error, join };

template <class C>
class DistributedPipeline {
 public:
  DistributedPipeline(data::Pipeline p, C& comm, Inputs inputs, UnevenInputs uneven)
      : p_(std::move(p)), comm_(&comm), inputs_(inputs), uneven_(uneven) {}

  struct Sentinel {};
  class Iterator {
   public:
    using value_type = data::Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(DistributedPipeline* owner, data::Pipeline::Iterator it) : owner_(owner), it_(std::move(it)) {
      if (owner_->inputs_ == Inputs::per_worker) advance_per_worker(/*first=*/true);
    }
    const data::Batch& operator*() const noexcept { return owner_->inputs_ == Inputs::split ? *it_ : cur_; }
    const data::Batch* operator->() const noexcept { return &**this; }
    Iterator& operator++() {
      if (owner_->inputs_ == Inputs::split)
        ++it_;
      else
        advance_per_worker(false);
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& i, Sentinel) noexcept { return i.at_end(); }

   private:
    bool at_end() const noexcept {
      return owner_->inputs_ == Inputs::split ? it_ == data::Pipeline::Sentinel{} : done_;
    }
    void advance_per_worker(bool first) {
      if (!first && it_ != data::Pipeline::Sentinel{}) ++it_;
      const bool mine = it_ != data::Pipeline::Sentinel{};
      const std::int64_t size = mine ? it_->size : -1;
      std::vector<std::int64_t>& sizes = owner_->sizes_;
      sizes.assign(static_cast<std::size_t>(owner_->comm_->size()), 0);
      owner_->comm_->allgather_raw(&size, sizes.data(), 1, DType::i64);
      std::int64_t total = 0, running = 0;
      std::vector<int> out;
      for (std::size_t r = 0; r < sizes.size(); ++r) {
        if (sizes[r] >= 0) {
          total += sizes[r];
          ++running;
        } else {
          out.push_back(static_cast<int>(r));
        }
      }
      if (running == 0) {
        done_ = true;
        return;
      }
      if (!out.empty() && owner_->uneven_ == UnevenInputs::error) {
        std::ostringstream os;
        os << strata::detail::error_text("strata.strategy.uneven_inputs") << "rank " << owner_->comm_->rank() << ", step " << step_ << ": ";
        if (!mine)
          os << "this rank exhausted its inputs after " << step_ << " batches while ranks still have data";
        else
          os << "detected rank(s) that exhausted their inputs";
        os << " (exhausted: [";
        for (std::size_t i = 0; i < out.size(); ++i) os << (i ? ", " : "") << out[i];
        os << "]); give every worker the same number of batches, or distribute(p, Inputs::per_worker, "
              "UnevenInputs::join)";
        throw invalid_argument(os.str());
      }
      if (mine) {
        cur_ = *it_;
      } else {  // joined: an empty batch with the dataset's shapes
        const data::TensorDataset& ds = owner_->p_.dataset();
        const std::int64_t epoch = cur_.epoch;
        cur_ = data::Batch();
        cur_.x = data::slice_rows(ds.x, 0, 0);
        if (ds.y.defined()) cur_.y = data::slice_rows(ds.y, 0, 0);
        for (const Tensor& t : ds.more_inputs) cur_.more_inputs.push_back(data::slice_rows(t, 0, 0));
        cur_.epoch = epoch;
      }
      cur_.global_size = total;
      cur_.global_offset = 0;  // this worker's rows come after the lower ranks'
      for (int r = 0; r < owner_->comm_->rank(); ++r)
        cur_.global_offset += std::max<std::int64_t>(sizes[static_cast<std::size_t>(r)], 0);
      cur_.index = step_++;
    }

    DistributedPipeline* owner_ = nullptr;
    data::Pipeline::Iterator it_;
    data::Batch cur_;
    std::int64_t step_ = 0;
    bool done_ = false;
  };

  /// Starts the next epoch (split inputs: after checking that every worker has as many batches).
  Iterator begin() {
    if (inputs_ == Inputs::split) check_same_batches();
    return Iterator(this, p_.begin());
  }
  Sentinel end() const noexcept { return {}; }

  /// Batches per epoch on this worker (per-worker inputs under join: up to the longest).
  std::int64_t num_batches() const noexcept { return p_.num_batches(); }
  std::int64_t epoch() const noexcept { return p_.epoch(); }
  void set_epoch(std::int64_t e) { p_.set_epoch(e); }
  const data::Pipeline& pipeline() const noexcept { return p_; }

 private:
  void check_same_batches() {
    // Every worker's epoch: [batches, examples in its split share of the dataset's batches].
    const std::int64_t mine[2] = {p_.num_batches(), p_.dataset().size()};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(comm_->size()));
    comm_->allgather_raw(mine, all.data(), 2, DType::i64);
    bool same = true;
    for (std::size_t r = 0; r < all.size(); r += 2) same = same && all[r] == all[0] && all[r + 1] == all[1];
    if (same) return;
    std::ostringstream os;
    os << strata::detail::error_text("strata.strategy.uneven_inputs") << "the workers' inputs differ in length: batches per epoch by rank [";
    for (std::size_t r = 0; r < all.size(); r += 2) os << (r ? ", " : "") << all[r];
    os << "], dataset examples by rank [";
    for (std::size_t r = 0; r < all.size(); r += 2) os << (r ? ", " : "") << all[r + 1];
    os << "]; distribute(p) splits every global batch across the workers and needs the same dataset on each; "
          "for per-worker data use distribute(p, Inputs::per_worker, UnevenInputs::join)";
    throw invalid_argument(os.str());
  }

  data::Pipeline p_;
  C* comm_;
  Inputs inputs_;
  UnevenInputs uneven_;
  std::vector<std::int64_t> sizes_;
};

}  // namespace strata

/// \file
/// ps::worker::RemoteTables<T>: a worker's remote tables (ParameterServerOptions::
/// remote_tables) — inside an epoch each table going by rows gives its memory back and its
/// lookups ask the servers, one [id, k, k row numbers] message per block, answered with the
/// rows (this object is the tables' RowSource); at the epoch's end the servers' values
/// arrive whole, as for every variable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include <strata/strategy/parameter_server/release_memory.hpp>
#include <strata/strategy/parameter_server/worker/state.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/row_source.hpp>

namespace strata::ps::worker {

template <class T>
class RemoteTables final : public RowSource {
 public:
  explicit RemoteTables(State<T>& st) : st_(st) {}
  RemoteTables(const RemoteTables&) = delete;
  RemoteTables& operator=(const RemoteTables&) = delete;
  /// A loop left by an exception leaves the tables attached: they must not point here after.
  ~RemoteTables() { detach(); }

  /// At an epoch's start: each table going by rows gives its memory back (it reads as zeros)
  /// and its lookups ask the servers (gather).
  void attach() {
    for (std::size_t v = 0; v < st_.shards.variables.size(); ++v) {
      if (!st_.by_rows(v)) continue;
      const Tensor& t = st_.shards.variables[v];
      release_bytes(static_cast<char*>(t.raw_data()), t.nbytes());
      t.impl()->ag.row_source = this;
      attached_ = true;
    }
  }
  /// At an epoch's end, before the servers' values arrive: lookups read the table's memory again.
  void detach() {
    if (!std::exchange(attached_, false)) return;
    for (std::size_t v = 0; v < st_.shards.variables.size(); ++v)
      if (st_.by_rows(v)) st_.shards.variables[v].impl()->ag.row_source = nullptr;
  }

  /// A lookup in a remote table: the distinct rows asked of the servers holding them, one
  /// message per block, then each looked-up row copied out in the lookup's order.
  void gather(const Tensor& table, std::span<const std::int64_t> rows, void* out) override {
    const std::ptrdiff_t found = st_.shards.index_of(table);
    STRATA_CHECK(found >= 0 && st_.by_rows(static_cast<std::size_t>(found)),
                 "ParameterServerStrategy: a lookup through the servers in a table they do not hold by rows");
    st_.ensure_tables();
    wanted_.assign(rows.begin(), rows.end());
    std::sort(wanted_.begin(), wanted_.end());
    wanted_.erase(std::unique(wanted_.begin(), wanted_.end()), wanted_.end());
    const std::size_t row_bytes = static_cast<std::size_t>(table.numel() / table.dim(0)) * size_of(table.dtype());
    looked_up_.resize(wanted_.size() * row_bytes);
    for (std::size_t id : st_.shards.of_variable[static_cast<std::size_t>(found)]) ask_block(id, row_bytes);
    st_.wait("the looked-up rows");
    const std::int64_t* first = wanted_.data();
    const std::int64_t* last = first + wanted_.size();
    char* to = static_cast<char*>(out);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto at = static_cast<std::size_t>(std::lower_bound(first, last, rows[r]) - first);
      std::memcpy(to + r * row_bytes, looked_up_.data() + at * row_bytes, row_bytes);
    }
  }

 private:
  /// Asks block `id`'s server for the wanted rows it holds, their values into looked_up_.
  void ask_block(std::size_t id, std::size_t row_bytes) {
    const std::int64_t* first = wanted_.data();
    const std::int64_t* last = first + wanted_.size();
    const Partition& q = st_.shards.partitions[id];
    const std::int64_t r0 = q.offset / q.row_width, r1 = (q.offset + q.count) / q.row_width;
    const std::int64_t lo = std::lower_bound(first, last, r0) - first, k = (std::lower_bound(first, last, r1) - first) - lo;
    if (k == 0) return;
    std::vector<std::int64_t>& ask = st_.tables[id].lookup;
    ask.resize(static_cast<std::size_t>(2 + k));
    ask[0] = static_cast<std::int64_t>(id);
    ask[1] = k;
    for (std::int64_t j = 0; j < k; ++j) ask[static_cast<std::size_t>(2 + j)] = first[lo + j] - r0;
    const int server = st_.server_rank(q);
    const std::size_t asked = ask.size() * 8, answered = static_cast<std::size_t>(k) * row_bytes;
    st_.post(st_.t.irecv(looked_up_.data() + static_cast<std::size_t>(lo) * row_bytes, answered, server, kLookupReplyTag),
             server);
    st_.post(st_.t.isend(ask.data(), asked, server, kLookupTag), server);
    st_.bytes += asked + answered;
    st_.stats.pushed_bytes += static_cast<double>(asked);
    st_.stats.pulled_bytes += static_cast<double>(answered);
    st_.stats.looked_up_bytes += static_cast<double>(asked + answered);
  }

  State<T>& st_;
  std::vector<std::int64_t> wanted_;  // a lookup's distinct rows, ascending
  std::vector<char> looked_up_;       // and their values
  bool attached_ = false;             // the remote tables read through this object
};

}  // namespace strata::ps::worker

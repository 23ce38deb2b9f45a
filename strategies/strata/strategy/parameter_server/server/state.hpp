/// \file
/// ps::server::State<T>: what every message family of a server rank reads and writes — the
/// partitions it holds (their values, sums, pushes and optimizers), the replies of each still
/// in flight, and the workers' table (lost, running, the epoch each takes part from).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::ps::server {

/// How a server runs (ParameterServerOptions, as the strategy passes them on).
struct Settings {
  bool sync = true;
  bool update_on_servers = true;
  std::int64_t staleness = -1;
  bool sparse_tables = false;  ///< row-sparse tables' blocks go by rows
  bool remote_tables = false;  ///< and the workers look their rows up here (no rows in replies)
  int min_workers = 1;         ///< Async: fewer live workers end the job
  int max_workers = 0;         ///< Async: a joiner past this many is refused (0: no bound)
};

/// One partition a server holds.
template <class T>
struct Held {
  std::size_t id = 0;
  Tensor value, sum;
  std::vector<Tensor> pushes;           // Sync: worker w's push (w >= 1) until the step completes
  std::unique_ptr<optim::Optimizer> opt;
  int arrived = 0;                      // Sync: pushes of the step so far
  std::vector<int> waiting;             // Sync: world ranks awaiting the reply; Async: held replies
  std::vector<typename T::Request> replies;  // in flight
  std::vector<int> reply_to;                 // the worker rank of each
  std::vector<std::int64_t> clock;      // Async: pushes per worker
  std::chrono::steady_clock::time_point first{};
  std::int64_t rows = 0;                             // a table block going by rows: elements per row
  std::vector<std::vector<std::int64_t>> row_pushes;  // its pushes this step, by worker
  std::int64_t reply_count = 0;                      // its reply: the row count, then
  std::vector<std::int64_t> reply_rows;              // [c row numbers, c rows]
  struct Reply {
    std::int64_t count = 0;
    std::vector<std::int64_t> rows;
  };
  std::vector<Reply> worker_replies;                   // Async: each worker's reply, by worker
  std::vector<std::vector<char>> dirty;                // Async: rows changed since each worker's last reply
  std::vector<std::vector<std::int64_t>> dirty_rows;  // and their list
  std::vector<std::vector<char>> lookups;             // remote tables: each worker's last lookup's rows
};

/// Copies rows `rows[0..c)` of `from` (or its first c rows, where rows is null) to `to`.
inline void copy_rows(const Tensor& from, const std::int64_t* rows, std::int64_t c, std::int64_t row_bytes, char* to) {
  const char* base = static_cast<const char*>(from.raw_data());
  const auto rb = static_cast<std::size_t>(row_bytes);
  if (!rows) {
    if (c > 0) std::memcpy(to, base, static_cast<std::size_t>(c) * rb);
    return;
  }
  for (std::int64_t j = 0; j < c; ++j)
    std::memcpy(to + static_cast<std::size_t>(j) * rb, base + static_cast<std::size_t>(rows[j]) * rb, rb);
}

template <class T>
struct State {
  State(T& transport, const Shards& sh, Settings st)
      : t(transport), shards(sh), s(st), me(transport.roles().index_of(transport.rank())),
        workers(static_cast<int>(transport.roles().workers.size())) {}

  T& t;
  const Shards& shards;
  Settings s;
  int me, workers;
  std::vector<Held<T>> held;
  std::vector<int> slot;                 // partition id -> index in held, or -1
  std::vector<char> running;             // Async: workers not yet done with the epoch (empty: all)
  std::vector<char> lost;                // Async: workers gone from the job
  std::vector<std::int64_t> starts_at;   // Async: the epoch each worker takes part from (-1: joined, not said yet)
  std::int64_t epoch = 0;                // epochs served
  std::int64_t most_rows = 0;            // rows of the largest table block held

  const Held<T>* find(std::size_t id) const {
    return id < slot.size() && slot[id] >= 0 ? &held[static_cast<std::size_t>(slot[id])] : nullptr;
  }
  Held<T>* find(std::size_t id) { return const_cast<Held<T>*>(std::as_const(*this).find(id)); }

  /// Partition `id`, a header over its variable's own elements (no copy: the server's model
  /// already holds them), with an autograd state of its own for the partition's gradient.
  void hold(std::size_t id) {
    NoGradGuard no_grad;
    const Partition& q = shards.partitions[id];
    if (slot.size() <= id) slot.resize(id + 1, -1);
    slot[id] = static_cast<int>(held.size());
    Held<T> h;
    h.id = id;
    const Tensor& v = shards.variables[q.variable];
    h.rows = s.sparse_tables && q.row_width > 0 ? q.row_width : 0;
    STRATA_CHECK(v.is_contiguous(), "ParameterServerStrategy: variable ", q.variable, " is not contiguous");
    h.value = strata::detail::make_view(v, h.rows ? Shape{q.count / h.rows, h.rows} : Shape{q.count},
                                        h.rows ? Shape{h.rows, 1} : Shape{1}, v.impl()->offset() + q.offset);
    h.value.requires_grad_(true);
    if (h.rows) {  // its rows come and go by rows: no dense sum, no dense pushes
      h.value.impl()->ag.row_sparse = true;
      h.row_pushes.resize(static_cast<std::size_t>(workers));
      if (s.remote_tables) h.lookups.resize(static_cast<std::size_t>(workers));
      most_rows = std::max(most_rows, q.count / h.rows);
      if (!s.sync) {
        h.worker_replies.resize(static_cast<std::size_t>(workers));
        h.dirty.resize(static_cast<std::size_t>(workers));
        h.dirty_rows.resize(static_cast<std::size_t>(workers));
      }
    } else {
      h.sum = Tensor::empty({q.count}, v.dtype());
      if (s.sync)
        for (int w = 1; w < workers; ++w) h.pushes.push_back(Tensor::empty({q.count}, v.dtype()));
    }
    h.clock.assign(static_cast<std::size_t>(workers), 0);
    held.push_back(std::move(h));
  }

  /// The workers' table, sized once the job's workers are known.
  void ensure_workers_table() {
    if (lost.empty()) lost.assign(static_cast<std::size_t>(workers), 0);
    if (starts_at.empty()) starts_at.assign(static_cast<std::size_t>(workers), 0);
  }
  std::size_t worker_index(int rank) const { return static_cast<std::size_t>(t.roles().index_of(rank)); }
  bool is_lost(int rank) const { return !lost.empty() && lost[worker_index(rank)]; }

  /// Tests the replies in flight; true while some are.
  bool progress_replies() {
    bool pending = false;
    for (Held<T>& h : held) {
      if (h.replies.empty()) continue;
      if (t.test_all(h.replies)) {
        h.replies.clear();
        h.reply_to.clear();
      } else {
        pending = true;
      }
    }
    return pending;
  }

  /// Queues a send of `bytes` at `data` to worker rank `to` as one of h's replies.
  void send_reply(Held<T>& h, const void* data, std::size_t bytes, int to, int tag) {
    h.replies.push_back(t.isend(data, bytes, to, tag));
    h.reply_to.push_back(to);
  }

  /// Completes the replies of `h` in flight to worker rank `to` (only).
  void complete_replies_to(Held<T>& h, int to) {
    if (is_lost(to)) return;
    std::size_t kept = 0;
    const auto deadline = std::chrono::steady_clock::now() + t.timeout();
    for (std::size_t k = 0; k < h.replies.size(); ++k) {
      if (h.reply_to[k] != to) {
        if (kept != k) {
          h.replies[kept] = std::move(h.replies[k]);
          h.reply_to[kept] = h.reply_to[k];
        }
        ++kept;
        continue;
      }
      t.wait_all(std::span(&h.replies[k], 1), deadline, [&](const std::string& why) {
        if (runtime::is_gone(runtime::settled_state([&] { return t.peer_state(to); }))) return;
        t.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", t.rank(), ": the reply of partition ",
                                           h.id, " to worker rank ", to, " failed: ", why, "; aborting the job"));
      });
    }
    h.replies.resize(kept);
    h.reply_to.resize(kept);
  }

  void complete_replies(Held<T>& h) {
    const auto deadline = std::chrono::steady_clock::now() + t.timeout();
    for (std::size_t k = 0; k < h.replies.size(); ++k) {
      const int to = h.reply_to[k];
      if (is_lost(to)) continue;  // Async: dropped (a send to a dead peer may never complete)
      t.wait_all(std::span(&h.replies[k], 1), deadline, [&](const std::string& why) {
        // Async: a reply to a worker that died is dropped (the loop hears of the loss).
        if (!s.sync && runtime::is_gone(runtime::settled_state([&] { return t.peer_state(to); }))) return;
        t.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", t.rank(), ": the reply of partition ",
                                           h.id, " to worker rank ", to, " failed: ", why, "; aborting the job"));
      });
    }
    h.replies.clear();
    h.reply_to.clear();
  }

  /// This server's values to worker rank `r` alone (a joiner's catch-up, or the end of an
  /// epoch that this server had ended before the joiner named it).
  void send_values_to(int r) {
    for (Held<T>& h : held) {
      complete_replies_to(h, r);
      // completed before the values change (push_async), or at the epoch's end
      send_reply(h, h.value.raw_data(), h.value.nbytes(), r, static_cast<int>(h.id));
    }
  }
};

}  // namespace strata::ps::server

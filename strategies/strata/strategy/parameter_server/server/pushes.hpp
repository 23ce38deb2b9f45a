/// \file
/// ps::server::Pushes<T>: a server's pushes and their replies (the pulls) — dense partitions
/// summed in worker order under Sync, applied on arrival under Async with the staleness bound,
/// and row-sparse table blocks by rows (server.hpp's file comment says how each goes).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <vector>

#include <strata/autograd/backward.hpp>  // Gradients
#include <strata/collective/detail/reduce.hpp>
#include <strata/kernels/cpu/rows.hpp>  // note_rows, number_rows, add_rows
#include <strata/runtime/process_state.hpp>
#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/support/error.hpp>

namespace strata::ps::server {

template <class T>
class Pushes {
 public:
  explicit Pushes(State<T>& st) : st_(st) {}

  /// A push of worker `w` to the partition its tag names, received and checked.
  void on_push(int w, typename T::Message& m) {
    const int id = m.tag - kPushTag;
    Held<T>* h = id >= 0 ? st_.find(static_cast<std::size_t>(id)) : nullptr;
    STRATA_REQUIRE(h != nullptr, invalid_argument, "strata.ps", "server rank ", st_.t.rank(), ": worker rank ", m.source,
                   " pushed to partition ", id, ", which this server does not hold (tag ", m.tag, ")");
    if (h->rows) return push_rows(*h, w, m);
    STRATA_REQUIRE(m.bytes == h->sum.nbytes(), invalid_argument, "strata.ps", "worker rank ", m.source, " pushed ",
                   m.bytes, " bytes to partition ", id, " of ", h->sum.nbytes());
    if (st_.s.sync)
      push_sync(*h, w, m);
    else
      push_async(*h, w, m);
  }

  /// Async: sends the held replies whose workers are within the staleness bound.
  void release(Held<T>& h) {
    if (h.waiting.empty() || st_.s.sync) return;
    std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < h.clock.size(); ++i)
      if (st_.running.empty() || st_.running[i]) slowest = std::min(slowest, h.clock[i]);
    std::erase_if(h.waiting, [&](int r) {
      const std::int64_t ahead = h.clock[st_.worker_index(r)] - slowest;
      if (st_.s.staleness >= 0 && slowest != std::numeric_limits<std::int64_t>::max() && ahead > st_.s.staleness)
        return false;
      reply(h, r);
      return true;
    });
  }
  void release_all() {
    for (Held<T>& h : st_.held) release(h);
  }

  /// Async: worker rank `r` is gone: no reply waits for it, and none waits on it.
  void forget(int r) {
    for (Held<T>& h : st_.held) {
      std::erase(h.waiting, r);
      release(h);
    }
  }

  /// Sync: a step that has some pushes and waited past the timeout for the rest names who is missing.
  void check_sync_deadline(std::chrono::steady_clock::time_point now) {
    for (const Held<T>& h : st_.held) {
      if (h.arrived == 0 || now - h.first < st_.t.timeout()) continue;
      std::ostringstream os;
      os << strata::detail::error_text("strata.ps.timeout") << "server rank " << st_.t.rank() << ": partition " << h.id
         << " has " << h.arrived << " of " << st_.workers << " pushes of its step after "
         << std::chrono::duration<double>(st_.t.timeout()).count() << " s; missing:";
      for (int r : st_.t.roles().workers) {
        if (std::find(h.waiting.begin(), h.waiting.end(), r) != h.waiting.end()) continue;
        os << " worker rank " << r << runtime::describe_state(st_.t.peer_state(r));
      }
      st_.t.abort(os.str() + "; aborting the job");
    }
  }

 private:
  void update(Held<T>& h) {
    STRATA_REQUIRE(h.opt != nullptr, invalid_argument, "strata.ps", "partition ", h.id, " (variable ",
                   st_.shards.partitions[h.id].variable,
                   ") has no optimizer: create the optimizer under the strategy's scope(), or set update_on_servers = "
                   "false");
    if (!h.rows) h.value.impl()->ag.grad = h.sum;  // a table block's gradient is already its rows
    const Tensor one[1] = {h.value};
    h.opt->apply_gradients(Gradients{one});
  }

  void reply(Held<T>& h, int to_rank) {
    if (st_.is_lost(to_rank)) return;
    if (h.rows) return reply_rows(h, to_rank);
    const Tensor& from = st_.s.update_on_servers ? h.value : h.sum;
    st_.send_reply(h, from.raw_data(), from.nbytes(), to_rank, static_cast<int>(h.id));
  }

  void push_sync(Held<T>& h, int w, typename T::Message& m) {
    if (h.arrived == 0) {
      st_.complete_replies(h);  // the previous step's replies may still read the sum or value
      h.first = std::chrono::steady_clock::now();
    }
    st_.t.receive(m, w == 0 ? h.sum.raw_data() : h.pushes[static_cast<std::size_t>(w - 1)].raw_data());
    h.waiting.push_back(m.source);
    if (++h.arrived < st_.workers) return;
    strata::detail::visit_floating(h.sum.dtype(), "parameter server sum", [&](auto tag) {
      using E = decltype(tag);
      for (const Tensor& p : h.pushes)  // in worker order, whatever order they came in
        collective::detail::combine<E>(ReduceOp::Sum, static_cast<std::size_t>(h.sum.numel()), h.sum.template data<E>(),
                                       p.template data<E>());
    });
    if (st_.s.update_on_servers) update(h);
    for (int r : h.waiting) reply(h, r);
    h.waiting.clear();
    h.arrived = 0;
  }

  void push_async(Held<T>& h, int w, typename T::Message& m) {
    st_.complete_replies(h);  // replies of the old values must leave before they change
    st_.t.receive(m, h.sum.raw_data());
    update(h);
    ++h.clock[static_cast<std::size_t>(w)];
    h.waiting.push_back(m.source);
    release(h);
  }

  /// A push of a table block's rows (see server.hpp's file comment): received and checked,
  /// then, under Sync at the W-th, combined in worker order and applied; under Async applied at once.
  void push_rows(Held<T>& h, int w, typename T::Message& m) {
    std::vector<std::int64_t>& in = h.row_pushes[static_cast<std::size_t>(w)];
    receive_rows(h, m, in);
    h.waiting.push_back(m.source);
    if (!st_.s.sync) {
      apply_rows(h, std::span(&in, 1));
      ++h.clock[static_cast<std::size_t>(w)];
      release(h);
      return;
    }
    if (++h.arrived < st_.workers) return;
    const std::int64_t c = apply_rows(h, h.row_pushes);
    const std::size_t row_bytes = static_cast<std::size_t>(h.rows) * size_of(h.value.dtype());
    for (int r : h.waiting) {
      if (st_.is_lost(r)) continue;
      st_.send_reply(h, &h.reply_count, sizeof h.reply_count, r, static_cast<int>(h.id));
      if (c == 0) continue;
      st_.send_reply(h, h.reply_rows.data(), static_cast<std::size_t>(c) * (8 + row_bytes), r, static_cast<int>(h.id));
    }
    h.waiting.clear();
    h.arrived = 0;
  }

  /// Receives a row message into `in` and checks it against the block before anything is read
  /// from it. A malformed push is a broken or hostile worker: the job ends at once, naming it
  /// (a throw would leave the workers waiting for this server until their deadlines).
  void receive_rows(Held<T>& h, typename T::Message& m, std::vector<std::int64_t>& in) {
    const std::int64_t n = h.value.dim(0), width = h.rows;
    const std::size_t es = size_of(h.value.dtype());
    const std::size_t most = static_cast<std::size_t>(2 + n) * 8 + static_cast<std::size_t>(n * width) * es;
    const auto refuse = [&](const auto&... why) {
      st_.t.abort(strata::detail::error_text("strata.ps", "server rank ", st_.t.rank(), ": worker rank ", m.source,
                                             " pushed a malformed row message to table partition ", h.id, " (", why...,
                                             "); aborting the job"));
    };
    if (m.bytes < 16 || m.bytes > most) refuse(m.bytes, " bytes, a block of ", n, " rows takes 16 to ", most);
    if (st_.s.sync && h.arrived == 0) {
      st_.complete_replies(h);  // the previous step's replies still read reply_rows
      h.first = std::chrono::steady_clock::now();
    }
    in.resize((m.bytes + 7) / 8);
    st_.t.receive(m, in.data());
    const std::int64_t k = in[0];
    if (k < 0 || k > n || m.bytes != static_cast<std::size_t>(2 + k) * 8 + static_cast<std::size_t>(k * width) * es)
      refuse(k, " rows claimed in ", m.bytes, " bytes, a block of ", n, " rows");
    for (std::int64_t j = 0; j < k; ++j)
      if (const std::int64_t r = in[static_cast<std::size_t>(2 + j)]; r < 0 || r >= n)
        refuse("row ", r, " of a block of ", n, " rows");
  }

  /// Combines `pushes` (checked row messages) in their order into the block's row gradient
  /// and applies it. Sync: writes the reply into reply_count and reply_rows (the summed rows
  /// where the workers update, else the changed rows' new values); returns its row count.
  /// Async: marks the changed rows dirty for every live worker (reply() sends each worker its
  /// own); returns 0.
  std::int64_t apply_rows(Held<T>& h, std::span<const std::vector<std::int64_t>> pushes) {
    const std::int64_t width = h.rows;
    const bool lazy = (pushes[0][1] & 1) != 0;
    row_index_.clear();
    for (const auto& p : pushes) kernels::cpu::note_rows(p[0], p.data() + 2, row_slot_, row_index_);
    const std::int64_t kept = kernels::cpu::number_rows(row_slot_, row_index_);
    Tensor index = Tensor::empty({kept}, DType::i64), sums = Tensor::empty({kept, width}, h.value.dtype());
    std::copy_n(row_index_.data(), kept, index.data<std::int64_t>());
    strata::detail::visit_floating(h.value.dtype(), "parameter server rows", [&](auto tag) {
      using E = decltype(tag);
      E* d = sums.template data<E>();
      std::fill_n(d, kept * width, E(0));
      for (const auto& p : pushes)
        kernels::cpu::add_rows<E>(p[0], width, p.data() + 2, reinterpret_cast<const E*>(p.data() + 2 + p[0]), row_slot_, d);
    });
    kernels::cpu::clear_rows(row_slot_, row_index_);
    if (st_.s.update_on_servers) {
      h.opt->set_sparse_updates(lazy ? optim::SparseUpdates::lazy : optim::SparseUpdates::dense);
      auto& ag = h.value.impl()->ag;
      ag.grad_index = index;
      ag.grad_rows = sums;
      update(h);
    }
    if (!st_.s.sync) {
      mark_dirty(h, lazy, kept);
      return 0;
    }
    return sync_row_reply(h, lazy, kept, sums);
  }

  /// Async: the rows a push changed, dirty for every live worker: the lazy rule's, or every
  /// row (the dense rule moves them all). Remote tables: none (the workers look them up).
  void mark_dirty(Held<T>& h, bool lazy, std::int64_t kept) {
    const std::int64_t n = h.value.dim(0);
    for (std::size_t i = 0; !st_.s.remote_tables && i < h.dirty.size(); ++i) {
      if (!st_.lost.empty() && st_.lost[i]) continue;
      auto& marks = h.dirty[i];
      if (marks.empty()) marks.assign(static_cast<std::size_t>(n), 0);
      auto& list = h.dirty_rows[i];
      const auto mark = [&](std::int64_t r) {
        if (marks[static_cast<std::size_t>(r)]) return;
        marks[static_cast<std::size_t>(r)] = 1;
        list.push_back(r);
      };
      if (lazy)
        for (std::int64_t j = 0; j < kept; ++j) mark(row_index_[static_cast<std::size_t>(j)]);
      else
        for (std::int64_t r = 0; r < n; ++r) mark(r);
    }
  }

  /// Sync's reply, into reply_count and reply_rows: the summed rows (the workers update), the
  /// changed rows (the lazy rule), every row (the dense rule moves rows without a gradient
  /// too), or none (remote tables: the workers look up what they read). Returns its rows.
  std::int64_t sync_row_reply(Held<T>& h, bool lazy, std::int64_t kept, const Tensor& sums) {
    const std::int64_t n = h.value.dim(0), width = h.rows;
    const std::size_t es = size_of(h.value.dtype());
    const std::int64_t c = st_.s.remote_tables ? 0 : st_.s.update_on_servers && !lazy ? n : kept;
    h.reply_count = c;
    h.reply_rows.resize(static_cast<std::size_t>(c) + (static_cast<std::size_t>(c * width) * es + 7) / 8);
    std::int64_t* rows = h.reply_rows.data();
    if (c == kept)
      std::copy_n(row_index_.data(), c, rows);
    else if (c == n)
      for (std::int64_t r = 0; r < n; ++r) rows[r] = r;
    const Tensor& from = st_.s.update_on_servers ? h.value : sums;
    copy_rows(from, st_.s.update_on_servers ? rows : nullptr, c, width * static_cast<std::int64_t>(es),
              reinterpret_cast<char*>(rows + c));
    return c;
  }

  /// Async: a table block's reply to worker rank `to_rank`, in its own buffers: the count,
  /// then every row changed since its last reply (its own push's among them) with its value.
  void reply_rows(Held<T>& h, int to_rank) {
    const std::size_t i = st_.worker_index(to_rank);
    auto& list = h.dirty_rows[i];
    auto& marks = h.dirty[i];
    const std::int64_t c = static_cast<std::int64_t>(list.size()), width = h.rows;
    const std::size_t es = size_of(h.value.dtype()), row_bytes = static_cast<std::size_t>(width) * es;
    // Its own buffers, so replies to the others in flight do not hold this one up: a worker
    // posts the receive of its rows only once it has every block's count.
    st_.complete_replies_to(h, to_rank);  // (its previous reply: received before it pushed again)
    typename Held<T>::Reply& out = h.worker_replies[i];
    out.count = c;
    out.rows.resize(static_cast<std::size_t>(c) + (static_cast<std::size_t>(c) * row_bytes + 7) / 8);
    std::copy_n(list.data(), c, out.rows.data());
    copy_rows(h.value, out.rows.data(), c, static_cast<std::int64_t>(row_bytes), reinterpret_cast<char*>(out.rows.data() + c));
    for (std::int64_t r : list) marks[static_cast<std::size_t>(r)] = 0;
    list.clear();
    st_.send_reply(h, &out.count, sizeof out.count, to_rank, static_cast<int>(h.id));
    if (c == 0) return;
    st_.send_reply(h, out.rows.data(), static_cast<std::size_t>(c) * (8 + row_bytes), to_rank, static_cast<int>(h.id));
  }

  State<T>& st_;
  std::vector<std::int64_t> row_slot_, row_index_;  // combining a table block's rows (kernels/cpu/rows.hpp)
};

}  // namespace strata::ps::server

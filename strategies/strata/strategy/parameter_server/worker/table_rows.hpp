/// \file
/// ps::worker::TableRows<T>: a worker's row-sparse table blocks under Sync — each block's
/// push [k, flags, k row numbers, k rows] of the rows it touched (or every row, dense), with
/// the receive of its reply's row count posted first; then the reply's [c row numbers,
/// c rows]: the changed rows' values into the table (update on the servers), or the summed
/// rows as the table's row gradient (update on the workers). docs/design/sparse_tables.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/strategy/parameter_server/worker/state.hpp>
#include <strata/support/check.hpp>

namespace strata::ps::worker {

template <class T>
class TableRows {
 public:
  explicit TableRows(State<T>& st) : st_(st) {}

  /// Whether the optimizer's rule on row-sparse tables is the lazy one (told to the servers
  /// with each table push).
  void set_lazy_rows(bool lazy) noexcept { lazy_rows_ = lazy; }

  /// Pushes table variable v's gradient (its rows `rows`, or dense) block by block.
  void push(const Tensor& p, const RowGrad& rows, std::size_t v) {
    const std::size_t es = size_of(p.dtype());
    const Tensor dense = rows.defined() ? Tensor() : p.grad();
    STRATA_CHECK(rows.defined() || (dense.defined() && dense.is_contiguous() && dense.dtype() == p.dtype()),
                 "ParameterServerStrategy: the gradient of table variable ", v, " is missing or not contiguous");
    const std::int64_t* index = rows.defined() ? rows.indices.template data<std::int64_t>() : nullptr;
    const std::int64_t k_all = rows.size();
    for (std::size_t id : st_.shards.of_variable[v]) {
      const Partition& q = st_.shards.partitions[id];
      const std::int64_t w = q.row_width, r0 = q.offset / w, r1 = (q.offset + q.count) / w;
      std::int64_t lo = 0, k = r1 - r0;  // dense: every row of the block
      const char* values = dense.defined() ? static_cast<const char*>(dense.raw_data()) + st_.shards.byte_offset(q) : nullptr;
      if (rows.defined()) {
        lo = std::lower_bound(index, index + k_all, r0) - index;
        k = (std::lower_bound(index, index + k_all, r1) - index) - lo;
        values = static_cast<const char*>(rows.rows.raw_data()) + static_cast<std::size_t>(lo * w) * es;
      }
      TableBlock& b = st_.tables[id];
      const std::size_t bytes = static_cast<std::size_t>(2 + k) * 8 + static_cast<std::size_t>(k * w) * es;
      b.push.resize(words_for(bytes));
      b.push[0] = k;
      b.push[1] = lazy_rows_ ? kLazyRows : 0;
      for (std::int64_t j = 0; j < k; ++j) b.push[static_cast<std::size_t>(2 + j)] = (rows.defined() ? index[lo + j] : r0 + j) - r0;
      if (k > 0) std::memcpy(b.push.data() + 2 + k, values, static_cast<std::size_t>(k * w) * es);
      const int server = st_.server_rank(q);
      st_.post(st_.t.irecv(&b.count, sizeof b.count, server, static_cast<int>(id)), server);
      st_.post(st_.t.isend(b.push.data(), bytes, server, kPushTag + static_cast<int>(id)), server);
      st_.bytes += bytes + sizeof b.count;
      st_.stats.pushed_bytes += static_cast<double>(bytes);
      st_.stats.pulled_bytes += static_cast<double>(sizeof b.count);
      if (rows.defined()) st_.stats.touched_bytes += static_cast<double>(k) * static_cast<double>(8 + static_cast<std::size_t>(w) * es);
    }
  }

  /// The tables' replies after their counts: received, then each table's rows taken in.
  void pull(const Gradients& g, const std::vector<std::size_t>& vars) {
    bool any = false;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (!st_.by_rows(vars[i])) continue;
      any = true;
      receive_rows(vars[i], size_of(g.params[i].dtype()));
    }
    if (!any) return;
    st_.wait("the tables' rows");
    for (std::size_t i = 0; i < g.size(); ++i)
      if (st_.by_rows(vars[i])) take_rows(g.params[i], vars[i]);
  }

 private:
  static constexpr std::int64_t kLazyRows = 1;  // a table push's flag: the lazy rule

  /// Posts the receive of every block's reply rows of table variable v, its counts checked.
  void receive_rows(std::size_t v, std::size_t es) {
    for (std::size_t id : st_.shards.of_variable[v]) {
      const Partition& q = st_.shards.partitions[id];
      TableBlock& b = st_.tables[id];
      const std::int64_t n = q.count / q.row_width;
      if (b.count < 0 || b.count > n)
        st_.t.abort(strata::detail::error_text("strata.ps", "worker rank ", st_.t.rank(), ": the reply of partition ", id,
                                               " claims ", b.count, " rows of a block of ", n, "; aborting the job"));
      if (b.count == 0) continue;
      const std::size_t bytes = static_cast<std::size_t>(b.count) * (8 + static_cast<std::size_t>(q.row_width) * es);
      b.reply.resize(words_for(bytes));
      const int server = st_.server_rank(q);
      st_.post(st_.t.irecv(b.reply.data(), bytes, server, static_cast<int>(id)), server);
      st_.bytes += bytes;
      st_.stats.pulled_bytes += static_cast<double>(bytes);
    }
  }

  /// Table p's (variable v's) reply rows: into the table, or as its row gradient.
  void take_rows(const Tensor& p, std::size_t v) {
    strata::detail::visit_floating(p.dtype(), "parameter server rows", [&](auto tag) {
      using E = decltype(tag);
      std::int64_t total = 0;
      for (std::size_t id : st_.shards.of_variable[v]) total += st_.tables[id].count;
      Tensor gi, gr;
      if (!st_.update_on_servers) {
        Shape rs = p.shape();
        rs[0] = total;
        gi = Tensor::empty({total}, DType::i64);
        gr = Tensor::empty(rs, p.dtype());
      }
      std::int64_t at = 0;  // blocks ascend, and rows within each: the row gradient ascends
      for (std::size_t id : st_.shards.of_variable[v]) {
        const Partition& q = st_.shards.partitions[id];
        const TableBlock& b = st_.tables[id];
        const std::int64_t w = q.row_width, r0 = q.offset / w, n = q.count / w;
        const E* values = reinterpret_cast<const E*>(b.reply.data() + b.count);
        for (std::int64_t j = 0; j < b.count; ++j) {
          const std::int64_t local = b.reply[static_cast<std::size_t>(j)];
          if (local < 0 || local >= n)
            st_.t.abort(strata::detail::error_text("strata.ps", "worker rank ", st_.t.rank(), ": the reply of partition ",
                                                   id, " names row ", local, " of a block of ", n, "; aborting the job"));
          if (st_.update_on_servers) {
            std::copy_n(values + j * w, w, p.template data<E>() + (r0 + local) * w);
          } else {
            gi.template data<std::int64_t>()[at + j] = r0 + local;
            std::copy_n(values + j * w, w, gr.template data<E>() + (at + j) * w);
          }
        }
        at += b.count;
      }
      if (!st_.update_on_servers) {
        auto& ag = p.impl()->ag;
        ag.grad_index = std::move(gi);
        ag.grad_rows = std::move(gr);
      }
    });
  }

  State<T>& st_;
  bool lazy_rows_ = true;
};

}  // namespace strata::ps::worker

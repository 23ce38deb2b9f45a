/// \file
/// ps::Worker<T>: a worker rank's side of a ParameterServerStrategy — one push/pull per step.
/// Each partition's reply receive is posted before its push is sent, straight into tensor
/// memory: the new values into the parameter (update on the servers), or the summed gradient
/// into a buffer that then becomes the parameter's gradient (update on the workers; the old
/// gradient tensor is the next step's buffer). No copies, no allocation after the first step.
///
/// A row-sparse table's blocks under Sync go by rows (docs/design/sparse_tables.md): the worker
/// pushes [k, flags, k row numbers, k rows] of the rows it touched in each block, and the
/// server answers with a count, then [c row numbers, c rows]: the rows that changed (their
/// new values), or, where the workers update, the summed rows, which become the table's row
/// gradient.
///
/// Remote tables (ParameterServerOptions::remote_tables): inside an epoch the worker's copy
/// of such a table gives its memory back, and embedding() asks the servers for the rows it
/// reads (the worker is the table's RowSource: one [id, k, k row numbers] message per block,
/// answered with the rows); the replies to its pushes then carry no rows. At the epoch's end
/// the servers' values arrive whole, as for every variable.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/tensor/row_source.hpp>
#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/strategy/parameter_server/release_memory.hpp>
#include <strata/strategy/parameter_server/shards.hpp>

namespace strata::ps {

/// What a worker moved through the servers, summed over its steps (push_pull calls).
struct TransferStats {
  std::int64_t steps = 0;
  double pushed_bytes = 0;  ///< gradients sent to the servers
  double pulled_bytes = 0;  ///< replies received: new values, or summed gradients
  double touched_bytes = 0;  ///< the tables' share of the pushes at the least: the rows touched with their numbers
  double looked_up_bytes = 0;  ///< remote tables: the rows looked up with their requests (in pushed and pulled too)
};

template <class T>
class Worker final : public RowSource {
 public:
  /// `sparse_tables`: row-sparse tables go by rows (Sync).
  Worker(T& transport, const Shards& shards, bool update_on_servers, bool sparse_tables = false)
      : t_(transport), shards_(shards), update_on_servers_(update_on_servers), sparse_tables_(sparse_tables) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  /// A loop left by an exception leaves the tables attached: they must not point here after.
  ~Worker() { detach_remote_tables(); }

  /// Whether the optimizer's rule on row-sparse tables is the lazy one (told to the servers
  /// with each table push).
  void set_lazy_rows(bool lazy) noexcept { lazy_rows_ = lazy; }

  /// Sends `g` to the servers and waits for the replies: afterwards the parameters hold the
  /// servers' new values (update on servers) or `g` holds the sum over all workers. `lr`: the
  /// rate the servers are to apply; a negative one leaves theirs as it is.
  void push_pull(Gradients g, double lr) {
    const auto& servers = t_.roles().servers;
    if (update_on_servers_ && lr >= 0 && lr != sent_lr_) {  // the servers apply the rate the worker's optimizer has
      for (int s : servers) post(t_.isend(&lr, sizeof lr, s, kLearningRateTag), s);
      wait("the learning rate");
      sent_lr_ = lr;
    }
    if (sums_.size() < shards_.variables.size()) sums_.resize(shards_.variables.size());
    if (tables_.size() < shards_.partitions.size()) tables_.resize(shards_.partitions.size());
    const std::vector<std::size_t>& vars = variables_of(g);
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Tensor& p = g.params[i];
      const std::size_t v = vars[i];
      if (by_rows(v)) {  // before g[i], which would make its rows dense
        push_table(p, g.rows(i), v);
        continue;
      }
      const Tensor grad = g[i];
      STRATA_CHECK(grad.defined() && grad.is_contiguous() && grad.dtype() == p.dtype(),
                   "ParameterServerStrategy: the gradient of parameter ", i, " is missing or not contiguous");
      char* into = static_cast<char*>(p.raw_data());
      if (!update_on_servers_) {
        Tensor& sum = sums_[v];
        if (!sum.defined()) sum = Tensor::empty(p.shape(), p.dtype());
        into = static_cast<char*>(sum.raw_data());
      }
      for (std::size_t id : shards_.of_variable[v]) {
        const Partition& q = shards_.partitions[id];
        const std::size_t off = shards_.byte_offset(q), bytes = shards_.bytes(q);
        const int server = servers[static_cast<std::size_t>(q.server)];
        post(t_.irecv(into + off, bytes, server, static_cast<int>(id)), server);
        bytes_ += 2 * bytes;
        stats_.pushed_bytes += static_cast<double>(bytes);
        stats_.pulled_bytes += static_cast<double>(bytes);
        post(t_.isend(static_cast<const char*>(grad.raw_data()) + off, bytes, server, kPushTag + static_cast<int>(id)),
             server);
      }
    }
    wait("replies");
    pull_tables(g, vars);
    ++stats_.steps;
    if (!update_on_servers_)
      for (std::size_t i = 0; i < g.size(); ++i)
        if (!by_rows(vars[i])) std::swap(g.params[i].impl()->ag.grad, sums_[vars[i]]);
  }

  const TransferStats& stats() const noexcept { return stats_; }

  /// Whether variable v goes by rows: a row-sparse table, under Sync.
  bool by_rows(std::size_t v) const {
    return sparse_tables_ && shards_.partitions[shards_.of_variable[v].front()].row_width > 0;
  }

  /// Tells every server this worker has finished the epoch (batch requests still in flight,
  /// from a loop left early, are answered then, and their batches go to the others).
  void finish_epoch() {
    static const char byte = 0;
    for (int s : t_.roles().servers) post(t_.isend(&byte, 1, s, kDoneTag), s);
    wait("the end of the epoch");
    while (!asks_.empty()) take_answer();  // a loop left early: the first server answers these now
  }

  /// Receives every partition's value from its server into the variables (Server::send_values).
  void receive_values() {
    for (std::size_t id = 0; id < shards_.partitions.size(); ++id) {
      const Partition& q = shards_.partitions[id];
      const int server = t_.roles().servers[static_cast<std::size_t>(q.server)];
      post(t_.irecv(static_cast<char*>(shards_.variables[q.variable].raw_data()) + shards_.byte_offset(q),
                    shards_.bytes(q), server, static_cast<int>(id)),
           server);
      bytes_ += shards_.bytes(q);
    }
    wait("the servers' values");
  }

  /// A worker that joined the running job: asks the first server for the epoch it joins at,
  /// names that epoch to the other servers, and receives every partition's current value
  /// from its server (Server::catch_up). Returns the epoch.
  std::int64_t catch_up() {
    const auto& servers = t_.roles().servers;
    std::int64_t epoch = -1;
    double named = -1;  // the first server decides
    post(t_.irecv(&epoch, sizeof epoch, servers.front(), kCatchUpReplyTag), servers.front());
    post(t_.isend(&named, sizeof named, servers.front(), kCatchUpTag), servers.front());
    wait("the epoch to join at");
    STRATA_REQUIRE(epoch >= 0, invalid_argument, "strata.ps", "worker rank ", t_.rank(), ": server rank ",
                   servers.front(), " refused this worker: the job has its max_workers already");
    named = static_cast<double>(epoch);
    std::vector<std::int64_t> theirs(servers.size(), epoch);
    for (std::size_t k = 1; k < servers.size(); ++k) {
      post(t_.irecv(&theirs[k], sizeof(std::int64_t), servers[k], kCatchUpReplyTag), servers[k]);
      post(t_.isend(&named, sizeof named, servers[k], kCatchUpTag), servers[k]);
    }
    receive_values();
    return epoch;
  }

  /// Asks every server to write its checkpoint shard at `step` (the chief, between steps: in
  /// Sync every server has then applied exactly `step` updates); returns their files' CRC-32Cs
  /// in server order once all are written.
  std::vector<std::int64_t> save_shards(std::int64_t step) {
    const auto& servers = t_.roles().servers;
    std::vector<std::int64_t> crcs(servers.size(), 0);
    for (std::size_t k = 0; k < servers.size(); ++k) {
      post(t_.irecv(&crcs[k], sizeof(std::int64_t), servers[k], kSaveAckTag), servers[k]);
      post(t_.isend(&step, sizeof step, servers[k], kSaveTag), servers[k]);
    }
    wait("the checkpoint shards");
    return crcs;
  }

  // ---- remote tables ------------------------------------------------------------------------

  /// At an epoch's start: each table going by rows gives its memory back (it reads as zeros)
  /// and its lookups ask the servers (gather).
  void attach_remote_tables() {
    for (std::size_t v = 0; v < shards_.variables.size(); ++v) {
      if (!by_rows(v)) continue;
      const Tensor& t = shards_.variables[v];
      release_bytes(static_cast<char*>(t.raw_data()), t.nbytes());
      t.impl()->ag.row_source = this;
      attached_ = true;
    }
  }
  /// At an epoch's end, before the servers' values arrive: lookups read the table's memory again.
  void detach_remote_tables() {
    if (!std::exchange(attached_, false)) return;
    for (std::size_t v = 0; v < shards_.variables.size(); ++v)
      if (by_rows(v)) shards_.variables[v].impl()->ag.row_source = nullptr;
  }

  /// A lookup in a remote table: the distinct rows asked of the servers holding them, one
  /// message per block, then each looked-up row copied out in the lookup's order.
  void gather(const Tensor& table, std::span<const std::int64_t> rows, void* out) override {
    const std::ptrdiff_t found = shards_.index_of(table);
    STRATA_CHECK(found >= 0 && by_rows(static_cast<std::size_t>(found)),
                 "ParameterServerStrategy: a lookup through the servers in a table they do not hold by rows");
    const auto v = static_cast<std::size_t>(found);
    const auto& servers = t_.roles().servers;
    if (tables_.size() < shards_.partitions.size()) tables_.resize(shards_.partitions.size());
    wanted_.assign(rows.begin(), rows.end());
    std::sort(wanted_.begin(), wanted_.end());
    wanted_.erase(std::unique(wanted_.begin(), wanted_.end()), wanted_.end());
    const std::size_t row_bytes = static_cast<std::size_t>(table.numel() / table.dim(0)) * size_of(table.dtype());
    looked_up_.resize(wanted_.size() * row_bytes);
    const std::int64_t* first = wanted_.data();
    const std::int64_t* last = first + wanted_.size();
    for (std::size_t id : shards_.of_variable[v]) {
      const Partition& q = shards_.partitions[id];
      const std::int64_t r0 = q.offset / q.row_width, r1 = (q.offset + q.count) / q.row_width;
      const std::int64_t lo = std::lower_bound(first, last, r0) - first, k = (std::lower_bound(first, last, r1) - first) - lo;
      if (k == 0) continue;
      std::vector<std::int64_t>& ask = tables_[id].lookup;
      ask.resize(static_cast<std::size_t>(2 + k));
      ask[0] = static_cast<std::int64_t>(id);
      ask[1] = k;
      for (std::int64_t j = 0; j < k; ++j) ask[static_cast<std::size_t>(2 + j)] = first[lo + j] - r0;
      const int server = servers[static_cast<std::size_t>(q.server)];
      const std::size_t asked = ask.size() * 8, answered = static_cast<std::size_t>(k) * row_bytes;
      post(t_.irecv(looked_up_.data() + static_cast<std::size_t>(lo) * row_bytes, answered, server, kLookupReplyTag), server);
      post(t_.isend(ask.data(), asked, server, kLookupTag), server);
      bytes_ += asked + answered;
      stats_.pushed_bytes += static_cast<double>(asked);
      stats_.pulled_bytes += static_cast<double>(answered);
      stats_.looked_up_bytes += static_cast<double>(asked + answered);
    }
    wait("the looked-up rows");
    char* to = static_cast<char*>(out);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto at = static_cast<std::size_t>(std::lower_bound(first, last, rows[r]) - first);
      std::memcpy(to + r * row_bytes, looked_up_.data() + at * row_bytes, row_bytes);
    }
  }

  // ---- dispatched batches (Async; ps::Dispatcher on the first server) ----------------------
  // Two requests are always in flight: the answer to the older one is the batch trained next,
  // the newer one is answered meanwhile. Each reports the batch finished just before it.

  /// The epoch's first two requests.
  void begin_batches() {
    STRATA_CHECK(asks_.empty(), "begin_batches: the previous epoch's requests are still in flight");
    ask(Dispatcher::kNone);
    ask(Dispatcher::kNone);
  }
  /// Reports `finished` (kNone: none), then returns the next batch to train, or kNone once the
  /// epoch is complete (every request answered by then).
  std::int64_t next_batch(std::int64_t finished) {
    if (finished != Dispatcher::kNone) ask(finished);
    std::int64_t b = take_answer();
    if (b == Dispatcher::kNone)
      while (!asks_.empty()) take_answer();
    return b;
  }

  /// The sum of `x` over the workers still in the job, through the first server.
  double sum_over_workers(double x) {
    double sum = 0;
    const int server = t_.roles().servers.front();
    post(t_.irecv(&sum, sizeof sum, server, kRateReplyTag), server);
    post(t_.isend(&x, sizeof x, server, kRateTag), server);
    wait("the job's sum");
    return sum;
  }

 private:
  /// One table block's messages: the push [k, flags, k row numbers, k rows], the reply's row
  /// count, then its [c row numbers, c rows].
  struct TableBlock {
    std::vector<std::int64_t> push, reply, lookup;
    std::int64_t count = 0;
  };
  static constexpr std::int64_t kLazyRows = 1;  // a table push's flag: the lazy rule

  static std::size_t words_for(std::size_t bytes) { return (bytes + 7) / 8; }

  /// Pushes table variable v's gradient (its rows `rows`, or dense) block by block, each with
  /// the receive of its reply's row count posted first.
  void push_table(const Tensor& p, const RowGrad& rows, std::size_t v) {
    const auto& servers = t_.roles().servers;
    const std::size_t es = size_of(p.dtype());
    const Tensor dense = rows.defined() ? Tensor() : p.grad();
    STRATA_CHECK(rows.defined() || (dense.defined() && dense.is_contiguous() && dense.dtype() == p.dtype()),
                 "ParameterServerStrategy: the gradient of table variable ", v, " is missing or not contiguous");
    const std::int64_t* index = rows.defined() ? rows.indices.template data<std::int64_t>() : nullptr;
    const std::int64_t k_all = rows.size();
    for (std::size_t id : shards_.of_variable[v]) {
      const Partition& q = shards_.partitions[id];
      const std::int64_t w = q.row_width, r0 = q.offset / w, r1 = (q.offset + q.count) / w;
      std::int64_t lo = 0, k = r1 - r0;  // dense: every row of the block
      const char* values = dense.defined() ? static_cast<const char*>(dense.raw_data()) + shards_.byte_offset(q) : nullptr;
      if (rows.defined()) {
        lo = std::lower_bound(index, index + k_all, r0) - index;
        k = (std::lower_bound(index, index + k_all, r1) - index) - lo;
        values = static_cast<const char*>(rows.rows.raw_data()) + static_cast<std::size_t>(lo * w) * es;
      }
      TableBlock& b = tables_[id];
      const std::size_t bytes = static_cast<std::size_t>(2 + k) * 8 + static_cast<std::size_t>(k * w) * es;
      b.push.resize(words_for(bytes));
      b.push[0] = k;
      b.push[1] = lazy_rows_ ? kLazyRows : 0;
      for (std::int64_t j = 0; j < k; ++j) b.push[static_cast<std::size_t>(2 + j)] = (rows.defined() ? index[lo + j] : r0 + j) - r0;
      if (k > 0) std::memcpy(b.push.data() + 2 + k, values, static_cast<std::size_t>(k * w) * es);
      const int server = servers[static_cast<std::size_t>(q.server)];
      post(t_.irecv(&b.count, sizeof b.count, server, static_cast<int>(id)), server);
      post(t_.isend(b.push.data(), bytes, server, kPushTag + static_cast<int>(id)), server);
      bytes_ += bytes + sizeof b.count;
      stats_.pushed_bytes += static_cast<double>(bytes);
      stats_.pulled_bytes += static_cast<double>(sizeof b.count);
      if (rows.defined()) stats_.touched_bytes += static_cast<double>(k) * static_cast<double>(8 + static_cast<std::size_t>(w) * es);
    }
  }

  /// The tables' replies after their counts: the changed rows' values into the tables
  /// (update on the servers), or the summed rows as each table's row gradient.
  void pull_tables(const Gradients& g, const std::vector<std::size_t>& vars) {
    const auto& servers = t_.roles().servers;
    bool any = false;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (!by_rows(vars[i])) continue;
      any = true;
      const std::size_t es = size_of(g.params[i].dtype());
      for (std::size_t id : shards_.of_variable[vars[i]]) {
        const Partition& q = shards_.partitions[id];
        TableBlock& b = tables_[id];
        const std::int64_t n = q.count / q.row_width;
        if (b.count < 0 || b.count > n)
          t_.abort(strata::detail::error_text("strata.ps", "worker rank ", t_.rank(), ": the reply of partition ", id,
                                              " claims ", b.count, " rows of a block of ", n, "; aborting the job"));
        if (b.count == 0) continue;
        const std::size_t bytes = static_cast<std::size_t>(b.count) * (8 + static_cast<std::size_t>(q.row_width) * es);
        b.reply.resize(words_for(bytes));
        const int server = servers[static_cast<std::size_t>(q.server)];
        post(t_.irecv(b.reply.data(), bytes, server, static_cast<int>(id)), server);
        bytes_ += bytes;
        stats_.pulled_bytes += static_cast<double>(bytes);
      }
    }
    if (!any) return;
    wait("the tables' rows");
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (!by_rows(vars[i])) continue;
      const Tensor& p = g.params[i];
      strata::detail::visit_floating(p.dtype(), "parameter server rows", [&](auto tag) {
        using E = decltype(tag);
        std::int64_t total = 0;
        for (std::size_t id : shards_.of_variable[vars[i]]) total += tables_[id].count;
        Tensor gi, gr;
        if (!update_on_servers_) {
          Shape rs = p.shape();
          rs[0] = total;
          gi = Tensor::empty({total}, DType::i64);
          gr = Tensor::empty(rs, p.dtype());
        }
        std::int64_t at = 0;  // blocks ascend, and rows within each: the row gradient ascends
        for (std::size_t id : shards_.of_variable[vars[i]]) {
          const Partition& q = shards_.partitions[id];
          const TableBlock& b = tables_[id];
          const std::int64_t w = q.row_width, r0 = q.offset / w, n = q.count / w;
          const E* values = reinterpret_cast<const E*>(b.reply.data() + b.count);
          for (std::int64_t j = 0; j < b.count; ++j) {
            const std::int64_t local = b.reply[static_cast<std::size_t>(j)];
            if (local < 0 || local >= n)
              t_.abort(strata::detail::error_text("strata.ps", "worker rank ", t_.rank(), ": the reply of partition ",
                                                  id, " names row ", local, " of a block of ", n, "; aborting the job"));
            if (update_on_servers_) {
              std::copy_n(values + j * w, w, p.template data<E>() + (r0 + local) * w);
            } else {
              gi.template data<std::int64_t>()[at + j] = r0 + local;
              std::copy_n(values + j * w, w, gr.template data<E>() + (at + j) * w);
            }
          }
          at += b.count;
        }
        if (!update_on_servers_) {
          auto& ag = p.impl()->ag;
          ag.grad_index = std::move(gi);
          ag.grad_rows = std::move(gr);
        }
      });
    }
  }

  /// The variable index of each of `g`'s parameters; looked up once per parameter list (a
  /// step then only compares the tensors with the previous step's).
  const std::vector<std::size_t>& variables_of(const Gradients& g) {
    bool same = seen_.size() == g.size();
    for (std::size_t i = 0; same && i < g.size(); ++i) same = seen_[i] == g.params[i].impl();
    if (same) return vars_;
    seen_.clear();
    vars_.clear();
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::ptrdiff_t v = shards_.index_of(g.params[i]);
      STRATA_CHECK(v >= 0, "ParameterServerStrategy: apply_gradients on parameter ", i,
                   ", which was not created under the strategy's scope()");
      seen_.push_back(g.params[i].impl());
      vars_.push_back(static_cast<std::size_t>(v));
    }
    return vars_;
  }

  void post(typename T::Request r, int server) {
    requests_.push_back(r);
    peers_.push_back(server);
  }

  // The servers report a stalled step first (after the timeout); a worker waits a little longer.
  void wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + t_.timeout() + t_.timeout() / 4 + std::chrono::seconds(1);
    t_.wait_all(requests_, deadline, [&](const std::string& why) { t_.abort(timeout_message(what, why)); }, bytes_);
    requests_.clear();
    bytes_ = 0;
    peers_.clear();
  }

  std::string timeout_message(const char* what, const std::string& why) {
    std::ostringstream os;
    os << strata::detail::error_text("strata.ps.timeout") << "worker rank " << t_.rank() << ": " << what << " not complete (" << why
       << "); waiting for";
    std::vector<int> named;
    for (std::size_t k = 0; k < requests_.size(); ++k) {
      const int s = peers_[k];
      if (t_.test(requests_[k]) || std::find(named.begin(), named.end(), s) != named.end()) continue;
      named.push_back(s);
      os << " server rank " << s << runtime::describe_state(runtime::settled_state([&] { return t_.peer_state(s); }));
    }
    if (named.empty()) os << " the servers";
    return os.str() + "; aborting the job";
  }

  // One request for a batch: the finished batch it reports, the answer, and their messages.
  struct Ask {
    std::int64_t finished = Dispatcher::kNone, answer = Dispatcher::kNone;
    typename T::Request recv, send;
  };
  void ask(std::int64_t finished) {
    const int server = t_.roles().servers.front();
    Ask& a = asks_.emplace_back();  // a deque: its bytes stay put while the messages are in flight
    a.finished = finished;
    a.recv = t_.irecv(&a.answer, sizeof a.answer, server, kBatchReplyTag);
    a.send = t_.isend(&a.finished, sizeof a.finished, server, kBatchTag);
  }
  std::int64_t take_answer() {
    Ask& a = asks_.front();
    typename T::Request both[2] = {a.send, a.recv};
    const auto deadline = std::chrono::steady_clock::now() + t_.timeout() + t_.timeout() / 4 + std::chrono::seconds(1);
    t_.wait_all(std::span(both), deadline, [&](const std::string& why) {
      t_.abort(strata::detail::error_text("strata.ps.timeout", "worker rank ", t_.rank(), ": the next batch from server "
                                          "rank ", t_.roles().servers.front(), " did not come (", why, "); aborting the job"));
    });
    const std::int64_t b = a.answer;
    asks_.pop_front();
    return b;
  }

  T& t_;
  const Shards& shards_;
  std::deque<Ask> asks_;
  bool update_on_servers_;
  bool sparse_tables_ = false;
  bool lazy_rows_ = true;
  double sent_lr_ = -1;
  std::vector<typename T::Request> requests_;
  std::vector<int> peers_;        // the server rank of each request
  std::size_t bytes_ = 0;         // pushed and pulled by the requests
  std::vector<Tensor> sums_;      // update on workers: the next summed gradient of each variable
  std::vector<const void*> seen_;  // the parameter list variables_of() last resolved
  std::vector<std::size_t> vars_;  // and its variable indices
  TransferStats stats_;
  std::vector<TableBlock> tables_;  // by partition id (table blocks only)
  std::vector<std::int64_t> wanted_;  // a remote lookup's distinct rows, ascending
  std::vector<char> looked_up_;       // and their values
  bool attached_ = false;             // the remote tables read through this worker
};

}  // namespace strata::ps

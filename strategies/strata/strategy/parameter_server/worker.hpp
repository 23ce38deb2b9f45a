/// \file
/// ps::Worker<T>: a worker rank's side of a ParameterServerStrategy — one push/pull per step,
/// over the parts in worker/: the state they share (state.hpp), table blocks by rows
/// (table_rows.hpp), remote tables (remote_tables.hpp), dispatched batches (batch_requests.hpp).
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

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/strategy/parameter_server/worker/batch_requests.hpp>
#include <strata/strategy/parameter_server/worker/remote_tables.hpp>
#include <strata/strategy/parameter_server/worker/state.hpp>
#include <strata/strategy/parameter_server/worker/table_rows.hpp>
#include <strata/support/check.hpp>

namespace strata::ps {

template <class T>
class Worker {
 public:
  /// `sparse_tables`: row-sparse tables go by rows (Sync).
  Worker(T& transport, const Shards& shards, bool update_on_servers, bool sparse_tables = false)
      : st_(transport, shards, update_on_servers, sparse_tables) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Whether the optimizer's rule on row-sparse tables is the lazy one (told to the servers
  /// with each table push).
  void set_lazy_rows(bool lazy) noexcept { tables_.set_lazy_rows(lazy); }

  /// Sends `g` to the servers and waits for the replies: afterwards the parameters hold the
  /// servers' new values (update on servers) or `g` holds the sum over all workers. `lr`: the
  /// rate the servers are to apply; a negative one leaves theirs as it is.
  void push_pull(Gradients g, double lr) {
    if (st_.update_on_servers && lr >= 0 && lr != sent_lr_) {  // the servers apply the rate the worker's optimizer has
      for (int s : st_.t.roles().servers) st_.post(st_.t.isend(&lr, sizeof lr, s, kLearningRateTag), s);
      st_.wait("the learning rate");
      sent_lr_ = lr;
    }
    if (sums_.size() < st_.shards.variables.size()) sums_.resize(st_.shards.variables.size());
    st_.ensure_tables();
    const std::vector<std::size_t>& vars = variables_of(g);
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (st_.by_rows(vars[i]))  // before g[i], which would make its rows dense
        tables_.push(g.params[i], g.rows(i), vars[i]);
      else
        push_dense(g.params[i], g[i], vars[i], i);
    }
    st_.wait("replies");
    tables_.pull(g, vars);
    ++st_.stats.steps;
    if (!st_.update_on_servers)
      for (std::size_t i = 0; i < g.size(); ++i)
        if (!st_.by_rows(vars[i])) std::swap(g.params[i].impl()->ag.grad, sums_[vars[i]]);
  }

  const TransferStats& stats() const noexcept { return st_.stats; }

  /// Whether variable v goes by rows: a row-sparse table, under Sync.
  bool by_rows(std::size_t v) const { return st_.by_rows(v); }

  /// Tells every server this worker has finished the epoch (batch requests still in flight,
  /// from a loop left early, are answered then, and their batches go to the others).
  void finish_epoch() {
    static const char byte = 0;
    for (int s : st_.t.roles().servers) st_.post(st_.t.isend(&byte, 1, s, kDoneTag), s);
    st_.wait("the end of the epoch");
    batches_.drain();  // a loop left early: the first server answers these now
  }

  /// Receives every partition's value from its server into the variables (Server::send_values).
  void receive_values() {
    for (std::size_t id = 0; id < st_.shards.partitions.size(); ++id) {
      const Partition& q = st_.shards.partitions[id];
      const int server = st_.server_rank(q);
      st_.post(st_.t.irecv(static_cast<char*>(st_.shards.variables[q.variable].raw_data()) + st_.shards.byte_offset(q),
                           st_.shards.bytes(q), server, static_cast<int>(id)),
               server);
      st_.bytes += st_.shards.bytes(q);
    }
    st_.wait("the servers' values");
  }

  /// A worker that joined the running job: asks the first server for the epoch it joins at,
  /// names that epoch to the other servers, and receives every partition's current value
  /// from its server (Server::catch_up). Returns the epoch.
  std::int64_t catch_up() {
    const auto& servers = st_.t.roles().servers;
    std::int64_t epoch = -1;
    double named = -1;  // the first server decides
    st_.post(st_.t.irecv(&epoch, sizeof epoch, servers.front(), kCatchUpReplyTag), servers.front());
    st_.post(st_.t.isend(&named, sizeof named, servers.front(), kCatchUpTag), servers.front());
    st_.wait("the epoch to join at");
    STRATA_REQUIRE(epoch >= 0, invalid_argument, "strata.ps", "worker rank ", st_.t.rank(), ": server rank ",
                   servers.front(), " refused this worker: the job has its max_workers already");
    named = static_cast<double>(epoch);
    std::vector<std::int64_t> theirs(servers.size(), epoch);
    for (std::size_t k = 1; k < servers.size(); ++k) {
      st_.post(st_.t.irecv(&theirs[k], sizeof(std::int64_t), servers[k], kCatchUpReplyTag), servers[k]);
      st_.post(st_.t.isend(&named, sizeof named, servers[k], kCatchUpTag), servers[k]);
    }
    receive_values();
    return epoch;
  }

  /// Asks every server to write its checkpoint shard at `step` (the chief, between steps: in
  /// Sync every server has then applied exactly `step` updates); returns their files' CRC-32Cs
  /// in server order once all are written.
  std::vector<std::int64_t> save_shards(std::int64_t step) {
    const auto& servers = st_.t.roles().servers;
    std::vector<std::int64_t> crcs(servers.size(), 0);
    for (std::size_t k = 0; k < servers.size(); ++k) {
      st_.post(st_.t.irecv(&crcs[k], sizeof(std::int64_t), servers[k], kSaveAckTag), servers[k]);
      st_.post(st_.t.isend(&step, sizeof step, servers[k], kSaveTag), servers[k]);
    }
    st_.wait("the checkpoint shards");
    return crcs;
  }

  /// Remote tables at an epoch's start and end (worker/remote_tables.hpp).
  void attach_remote_tables() { remote_.attach(); }
  void detach_remote_tables() { remote_.detach(); }

  /// Dispatched batches (worker/batch_requests.hpp): the epoch's first requests, then each
  /// finished batch reported and the next taken (kNone: the epoch is complete).
  void begin_batches() { batches_.begin(); }
  std::int64_t next_batch(std::int64_t finished) { return batches_.next(finished); }

  /// The sum of `x` over the workers still in the job, through the first server.
  double sum_over_workers(double x) {
    double sum = 0;
    const int server = st_.t.roles().servers.front();
    st_.post(st_.t.irecv(&sum, sizeof sum, server, kRateReplyTag), server);
    st_.post(st_.t.isend(&x, sizeof x, server, kRateTag), server);
    st_.wait("the job's sum");
    return sum;
  }

 private:
  /// Parameter p's dense gradient `grad` (variable v), partition by partition: each reply's
  /// receive posted before its push, straight into the parameter (update on the servers) or
  /// into the variable's next sum buffer.
  void push_dense(const Tensor& p, const Tensor& grad, std::size_t v, std::size_t i) {
    STRATA_CHECK(grad.defined() && grad.is_contiguous() && grad.dtype() == p.dtype(),
                 "ParameterServerStrategy: the gradient of parameter ", i, " is missing or not contiguous");
    char* into = static_cast<char*>(p.raw_data());
    if (!st_.update_on_servers) {
      Tensor& sum = sums_[v];
      if (!sum.defined()) sum = Tensor::empty(p.shape(), p.dtype());
      into = static_cast<char*>(sum.raw_data());
    }
    for (std::size_t id : st_.shards.of_variable[v]) {
      const Partition& q = st_.shards.partitions[id];
      const std::size_t off = st_.shards.byte_offset(q), bytes = st_.shards.bytes(q);
      const int server = st_.server_rank(q);
      st_.post(st_.t.irecv(into + off, bytes, server, static_cast<int>(id)), server);
      st_.bytes += 2 * bytes;
      st_.stats.pushed_bytes += static_cast<double>(bytes);
      st_.stats.pulled_bytes += static_cast<double>(bytes);
      st_.post(st_.t.isend(static_cast<const char*>(grad.raw_data()) + off, bytes, server, kPushTag + static_cast<int>(id)),
               server);
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
      const std::ptrdiff_t v = st_.shards.index_of(g.params[i]);
      STRATA_CHECK(v >= 0, "ParameterServerStrategy: apply_gradients on parameter ", i,
                   ", which was not created under the strategy's scope()");
      seen_.push_back(g.params[i].impl());
      vars_.push_back(static_cast<std::size_t>(v));
    }
    return vars_;
  }

  worker::State<T> st_;
  worker::TableRows<T> tables_{st_};
  worker::RemoteTables<T> remote_{st_};
  worker::BatchRequests<T> batches_{st_.t};
  double sent_lr_ = -1;
  std::vector<Tensor> sums_;       // update on workers: the next summed gradient of each variable
  std::vector<const void*> seen_;  // the parameter list variables_of() last resolved
  std::vector<std::size_t> vars_;  // and its variable indices
};

}  // namespace strata::ps

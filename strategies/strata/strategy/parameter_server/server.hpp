/// \file
/// ps::Server<T>: a server rank's side of a ParameterServerStrategy — the values of the
/// partitions it holds, an optimizer per partition when the update runs here, and the request
/// loop of one epoch over transport T, which hands each message to its family in server/:
/// pushes and their replies (pushes.hpp), membership (membership.hpp), dispatched batches
/// (batch_answers.hpp), checkpoint shards (shard_files.hpp), remote lookups (lookups.hpp),
/// over the state they share (state.hpp).
///
///   Sync:  a partition's pushes are summed as they arrive (the first straight into the sum,
///          the others through a scratch buffer); at the W-th the update runs (or not) and all
///          W workers get the reply.
///   Async: each push is applied on arrival and answered, unless the pusher is more than
///          `staleness` pushes of that partition ahead of the slowest worker still running:
///          then its reply is held until the others catch up or finish.
/// Before a partition's buffers change, its replies still in flight complete (the workers
/// posted their receives before pushing, so this never waits on a worker's compute).
///
/// A Sync step's pushes are summed in worker order whenever they arrive (worker 0's straight
/// into the sum, the others each into a buffer of its own), so the sum is the same bits run
/// after run: what a resumed run must reproduce.
///
/// A row-sparse table's block (Settings::sparse_tables) holds no dense sum or push buffers:
/// each worker's push is [k, flags, k row numbers, k rows] (sized by the probe, checked
/// against the block before anything is read from it). Sync: at the W-th the rows are
/// combined in worker order, the update runs on them (the lazy rule, or the dense one, as the
/// workers' flag says), and every worker gets a count, then the changed rows with their new
/// values (or, where the workers update, the summed rows). Async: each push is applied on
/// arrival and marks the rows it changed dirty for every worker; a worker's reply is the
/// rows dirty for it (its own among them), from a buffer of its own. docs/design/sparse_tables.md.
///
/// Checkpoints: on the chief's kSaveTag(step) the server writes its shard — each partition's
/// value and optimizer state — to `DIR/ps-shard-SERVER-STEP.strata` (atomically) and
/// answers with the file's CRC-32C, which the chief's index records (see shard_path()).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/strategy/parameter_server/backoff.hpp>
#include <strata/strategy/parameter_server/release_memory.hpp>
#include <strata/strategy/parameter_server/server/batch_answers.hpp>
#include <strata/strategy/parameter_server/server/lookups.hpp>
#include <strata/strategy/parameter_server/server/membership.hpp>
#include <strata/strategy/parameter_server/server/pushes.hpp>
#include <strata/strategy/parameter_server/server/shard_files.hpp>
#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>

namespace strata::ps {

template <class T>
class Server {
 public:
  using Settings = server::Settings;
  using DispatchStats = server::DispatchStats;
  /// The first server's answer to a joiner's kCatchUpTag when the job has max_workers already.
  static constexpr std::int64_t kRefused = server::kRefused;

  Server(T& transport, const Shards& shards, Settings s) : st_(transport, shards, s) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Takes on this server's partitions among `ids` (just placed), from their variables' values.
  void hold(const std::vector<std::size_t>& ids) {
    for (std::size_t id : ids)
      if (st_.shards.partitions[id].server == st_.me) st_.hold(id);
    release_other_rows();
  }

  /// Whether this server's copy of variable v keeps only its own rows: a row-sparse table
  /// going by rows (its blocks are all a server reads or writes of it).
  bool keeps_own_rows(std::size_t v) const {
    return st_.s.sparse_tables && st_.shards.partitions[st_.shards.of_variable[v].front()].row_width > 0;
  }

  /// Gives back the memory of the rows of tables this server does not hold (they read as
  /// zeros): its copy of a table costs its blocks, not the table (docs/design/sparse_tables.md).
  void release_other_rows() {
    for (std::size_t id = 0; id < st_.shards.partitions.size(); ++id) {
      const Partition& q = st_.shards.partitions[id];
      if (!keeps_own_rows(q.variable) || st_.find(id)) continue;
      release_bytes(static_cast<char*>(st_.shards.variables[q.variable].raw_data()) + st_.shards.byte_offset(q),
                    st_.shards.bytes(q));
    }
  }

  /// Runs `opt`'s kind of optimizer on this server's partitions of its parameters.
  void attach(const optim::Optimizer& opt) {
    for (const Tensor& p : opt.params()) {
      const std::ptrdiff_t v = st_.shards.index_of(p);
      STRATA_CHECK(v >= 0, "ParameterServerStrategy: an optimizer created under scope() over a parameter that was "
                   "not (create the model under the same strategy's scope() first)");
      for (std::size_t id : st_.shards.of_variable[static_cast<std::size_t>(v)])
        if (server::Held<T>* h = st_.find(id)) h->opt = opt.clone_for({h->value});
    }
  }

  const DispatchStats& dispatch_stats() const noexcept { return batches_.stats(); }

  /// Serves requests until every worker has finished this epoch. `dispatched_batches` >= 0:
  /// the first server hands out the epoch's batches (ps::Dispatcher; Async).
  void serve_epoch(std::int64_t dispatched_batches = -1) {
    std::vector<char> done = begin_epoch(dispatched_batches);
    int finished = static_cast<int>(std::count(done.begin(), done.end(), 1));
    typename T::Message m;
    Backoff backoff(0, T::poll_window);
    auto last_check = std::chrono::steady_clock::now();
    while (finished < st_.workers) {
      // Replies move (MPI moves them only while polled), and pushes are still taken meanwhile:
      // a table block's reply rows leave only once the worker has every block's row count.
      const bool replying = T::poll_window.count() > 0 && st_.progress_replies();
      if (st_.t.probe(m)) {
        backoff.active();
        finished += handle(m, done);
        continue;
      }
      if (replying) {
        backoff.active();
        std::this_thread::yield();
        continue;
      }
      if (!backoff.pause()) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_check <= std::chrono::milliseconds(100)) continue;
      last_check = now;
      if (st_.s.sync) pushes_.check_sync_deadline(now);
      // Async: a worker whose process is gone (on this host) is lost even if its transport
      // has not said so yet.
      for (std::size_t i = 0; !st_.s.sync && i < done.size(); ++i) {
        const int r = st_.t.roles().workers[i];
        if (!done[i] && runtime::is_gone(st_.t.peer_state(r))) finished += lose(r, done);
      }
    }
    end_epoch();
  }

  /// Sends the values this server holds to every worker still in the job (the end of an
  /// epoch: each worker receives them straight into its variables; see Worker::receive_values).
  void send_values() {
    for (server::Held<T>& h : st_.held) {
      for (std::size_t i = 0; i < st_.lost.size(); ++i)
        if (!st_.lost[i] && (st_.starts_at.empty() || (st_.starts_at[i] >= 0 && st_.starts_at[i] < st_.epoch)))  // in the epoch ended
          st_.send_reply(h, h.value.raw_data(), h.value.nbytes(), st_.t.roles().workers[i], static_cast<int>(h.id));
      st_.complete_replies(h);
    }
  }

  /// The sum of every live worker's `x` (their job_examples_per_s), sent back to each of them.
  /// Server 0 only; a worker lost meanwhile is left out.
  double sum_over_workers() {
    if (st_.lost.empty()) st_.lost.assign(static_cast<std::size_t>(st_.workers), 0);
    std::vector<char> have = st_.lost;
    double sum = 0;
    typename T::Message m;
    Backoff backoff(0, T::poll_window);
    auto last_check = std::chrono::steady_clock::now();
    while (std::count(have.begin(), have.end(), 1) < st_.workers) {
      if (!st_.t.probe(m)) {
        if (backoff.pause() && std::chrono::steady_clock::now() - last_check > std::chrono::milliseconds(100)) {
          last_check = std::chrono::steady_clock::now();
          for (std::size_t i = 0; i < have.size(); ++i)
            if (!have[i] && runtime::is_gone(st_.t.peer_state(st_.t.roles().workers[i]))) lose(st_.t.roles().workers[i], have);
        }
        continue;
      }
      backoff.active();
      if (m.tag == kWorkerJoinedTag) {  // after the last epoch: it takes no part
        admit(m.source);
        have.push_back(1);
        st_.lost.back() = 1;
        continue;
      }
      const std::size_t w = st_.worker_index(m.source);
      if (m.tag == kWorkerLostTag) {
        lose(m.source, have);
        continue;
      }
      if (st_.lost[w]) continue;  // one that joined after the last epoch: nothing to serve it
      STRATA_REQUIRE(m.tag == kRateTag, invalid_argument, "strata.ps", "server rank ", st_.t.rank(), ": worker rank ",
                     m.source, " sent tag ", m.tag,
                     " while the job sums its rates (the workers ran different numbers of epochs?)");
      double x = 0;
      st_.t.receive(m, &x);
      sum += x;
      have[w] = 1;
    }
    std::vector<typename T::Request> out;
    for (std::size_t i = 0; i < st_.lost.size(); ++i)
      if (!st_.lost[i]) out.push_back(st_.t.isend(&sum, sizeof sum, st_.t.roles().workers[i], kRateReplyTag));
    st_.t.wait_all(out, std::chrono::steady_clock::now() + st_.t.timeout(), [&](const std::string&) {});
    return sum;
  }

  /// Epochs served so far: the one being served, inside serve_epoch().
  std::int64_t epoch() const noexcept { return st_.epoch; }

  /// Writes the values this server holds into its copies of the variables (the rest zero).
  void values_into_variables() {
    // The held partitions are views of their variables already; the others become zeros.
    for (std::size_t id = 0; id < st_.shards.partitions.size(); ++id) {
      const Partition& q = st_.shards.partitions[id];
      if (st_.find(id)) continue;
      char* at = static_cast<char*>(st_.shards.variables[q.variable].raw_data()) + st_.shards.byte_offset(q);
      if (keeps_own_rows(q.variable))
        release_bytes(at, st_.shards.bytes(q));
      else
        std::memset(at, 0, st_.shards.bytes(q));
    }
  }

  /// Where this server writes its checkpoint shards.
  void set_checkpoint_dir(std::filesystem::path dir) { shards_.set_dir(std::move(dir)); }

  /// The shard file of server `server` (its index among the servers) at step `step`.
  static std::filesystem::path shard_path(const std::filesystem::path& dir, int server, std::int64_t step) {
    return ps::shard_path(dir, server, step);
  }

  /// Takes each held partition's value and optimizer state from shard `r` (written by
  /// save_shard on this server's index), checking every partition's name and shape before
  /// changing anything.
  void restore_shard(const checkpoint::Reader& r) { shards_.restore(r); }

  /// Writes this server's shard at `step`; returns the file's CRC-32C.
  std::int64_t save_shard(std::int64_t step) { return shards_.save(step); }

  /// The updates applied to partition `id` (held here) so far.
  std::int64_t updates(std::size_t id) const {
    const server::Held<T>* h = st_.find(id);
    return h && h->opt ? h->opt->steps() : 0;
  }

 private:
  /// The epoch's table: a worker lost in an earlier epoch takes no part, nor one that joins
  /// at a later epoch; one that joined but has not said at which epoch (kCatchUpTag) holds
  /// the epoch's end. Returns who is done already.
  std::vector<char> begin_epoch(std::int64_t dispatched_batches) {
    members_.begin_epoch();
    if (dispatched_batches >= 0 && st_.me == 0) batches_.begin_epoch(dispatched_batches);
    std::vector<char> done(st_.lost.size());
    for (std::size_t i = 0; i < done.size(); ++i) done[i] = st_.lost[i] || st_.starts_at[i] > st_.epoch;
    st_.running.assign(done.size(), 1);
    for (std::size_t i = 0; i < done.size(); ++i) st_.running[i] = !done[i] && st_.starts_at[i] >= 0;
    return done;
  }

  /// One message, to its family; returns the workers it finished with this epoch.
  int handle(typename T::Message& m, std::vector<char>& done) {
    STRATA_REQUIRE(!st_.t.roles().is_server(m.source), invalid_argument, "strata.ps", "server rank ", st_.t.rank(),
                   ": a message from server rank ", m.source, " (tag ", m.tag, ")");
    const int w = st_.t.roles().index_of(m.source);
    switch (m.tag) {
      case kWorkerLostTag: return lose(m.source, done);
      case kWorkerJoinedTag:
        admit(m.source);
        done.push_back(0);  // until it says at which epoch it joins
        return 0;
      case kCatchUpTag: return members_.catch_up(w, m, done);
      case kDoneTag: return worker_done(w, m, done);
      case kBatchTag: batches_.on_request(w, m); return 0;
      case kSaveTag: shards_.on_save(m); return 0;
      case kLookupTag: lookups_.on_lookup(w, m); return 0;
      case kLearningRateTag: set_learning_rate(m); return 0;
      default: pushes_.on_push(w, m); return 0;
    }
  }

  /// Worker w's end of the epoch; 1 when it was still counted.
  int worker_done(int w, typename T::Message& m, std::vector<char>& done) {
    char byte = 0;
    st_.t.receive(m, &byte);
    const auto i = static_cast<std::size_t>(w);
    if (members_.stale_done(w, m.source)) return 0;  // the end of an epoch this server had ended: its values
    const int counted = done[i] ? 0 : 1;
    done[i] = 1;
    st_.running[i] = 0;
    if (!st_.s.sync) pushes_.release_all();
    batches_.leave(w);  // left early: what it held goes to the others
    return counted;
  }

  void set_learning_rate(typename T::Message& m) {
    double lr = 0;
    STRATA_REQUIRE(m.bytes == sizeof lr, invalid_argument, "strata.ps", "a learning-rate message of the wrong size");
    st_.t.receive(m, &lr);
    for (server::Held<T>& h : st_.held)
      if (h.opt) h.opt->set_lr(lr);
  }

  void admit(int r) {
    members_.admit(r);
    batches_.admit();
  }

  /// Async: takes worker rank `r` out of the job (its replies are dropped, the others no longer
  /// wait for it, its batches go to the others); Sync cannot complete a step without it.
  /// Returns 1 if it was still counted.
  int lose(int r, std::vector<char>& done) {
    const std::size_t i = st_.worker_index(r);
    if (!members_.take_out(r)) return 0;
    pushes_.forget(r);
    batches_.lost(static_cast<int>(i));
    const int counted = done[i] ? 0 : 1;
    done[i] = 1;
    return counted;
  }

  void end_epoch() {
    for (server::Held<T>& h : st_.held) {
      st_.complete_replies(h);
      STRATA_REQUIRE(h.arrived == 0, invalid_argument, "strata.ps", "server rank ", st_.t.rank(),
                     ": the epoch ended with partition ", h.id, " waiting for ", st_.workers - h.arrived,
                     " more pushes (the workers ran different numbers of steps)");
    }
    st_.running.clear();
    ++st_.epoch;
    batches_.end_epoch();
  }

  server::State<T> st_;
  server::Pushes<T> pushes_{st_};
  server::Membership<T> members_{st_};
  server::BatchAnswers<T> batches_{st_};
  server::ShardFiles<T> shards_{st_};
  server::Lookups<T> lookups_{st_};
};

}  // namespace strata::ps

/// \file
/// ps::Server<T>: a server rank's side of a ParameterServerStrategy — the values of the
/// partitions it holds, an optimizer per partition when the update runs here, and the request
/// loop of one epoch over transport T.
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
#include <span>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/checkpoint/crc32c.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/training_state.hpp>  // add_optimizer_state, read_optimizer_state
#include <strata/collective/detail/reduce.hpp>
#include <strata/kernels/cpu/rows.hpp>  // note_rows, number_rows, add_rows
#include <strata/optim/optimizer.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/strategy/parameter_server/backoff.hpp>
#include <strata/strategy/parameter_server/dispatcher.hpp>
#include <strata/strategy/parameter_server/release_memory.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/strategy/parameter_server/transport.hpp>  // AdmitsWorkers

namespace strata::ps {

template <class T>
class Server {
 public:
  struct Settings {
    bool sync = true;
    bool update_on_servers = true;
    std::int64_t staleness = -1;
    bool sparse_tables = false;  ///< row-sparse tables' blocks go by rows
    bool remote_tables = false;  ///< and the workers look their rows up here (no rows in replies)
    int min_workers = 1;         ///< Async: fewer live workers end the job
    int max_workers = 0;         ///< Async: a joiner past this many is refused (0: no bound)
  };
  /// The first server's answer to a joiner's kCatchUpTag when the job has max_workers already.
  static constexpr std::int64_t kRefused = -2;

  Server(T& transport, const Shards& shards, Settings s)
      : t_(transport), shards_(shards), s_(s), me_(transport.roles().index_of(transport.rank())),
        workers_(static_cast<int>(transport.roles().workers.size())) {}

  /// Takes on this server's partitions among `ids` (just placed), from their variables' values.
  void hold(const std::vector<std::size_t>& ids) {
    NoGradGuard no_grad;
    for (std::size_t id : ids) {
      const Partition& q = shards_.partitions[id];
      if (q.server != me_) continue;
      if (slot_.size() <= id) slot_.resize(id + 1, -1);
      slot_[id] = static_cast<int>(held_.size());
      Held h;
      h.id = id;
      const Tensor& v = shards_.variables[q.variable];
      h.rows = s_.sparse_tables && q.row_width > 0 ? q.row_width : 0;
      // A header over the variable's own elements (no copy: the server's model already holds
      // them), with an autograd state of its own for the partition's gradient.
      STRATA_CHECK(v.is_contiguous(), "ParameterServerStrategy: variable ", q.variable, " is not contiguous");
      h.value = strata::detail::make_view(v, h.rows ? Shape{q.count / h.rows, h.rows} : Shape{q.count},
                                          h.rows ? Shape{h.rows, 1} : Shape{1}, v.impl()->offset() + q.offset);
      h.value.requires_grad_(true);
      if (h.rows) {  // its rows come and go by rows: no dense sum, no dense pushes
        h.value.impl()->ag.row_sparse = true;
        h.row_pushes.resize(static_cast<std::size_t>(workers_));
        if (s_.remote_tables) h.lookups.resize(static_cast<std::size_t>(workers_));
        most_rows_ = std::max(most_rows_, q.count / h.rows);
        if (!s_.sync) {
          h.worker_replies.resize(static_cast<std::size_t>(workers_));
          h.dirty.resize(static_cast<std::size_t>(workers_));
          h.dirty_rows.resize(static_cast<std::size_t>(workers_));
        }
      } else {
        h.sum = Tensor::empty({q.count}, v.dtype());
        if (s_.sync)
          for (int w = 1; w < workers_; ++w) h.pushes.push_back(Tensor::empty({q.count}, v.dtype()));
      }
      h.clock.assign(static_cast<std::size_t>(workers_), 0);
      held_.push_back(std::move(h));
    }
    release_other_rows();
  }

  /// Whether this server's copy of variable v keeps only its own rows: a row-sparse table
  /// going by rows (its blocks are all a server reads or writes of it).
  bool keeps_own_rows(std::size_t v) const {
    return s_.sparse_tables && shards_.partitions[shards_.of_variable[v].front()].row_width > 0;
  }

  /// Gives back the memory of the rows of tables this server does not hold (they read as
  /// zeros): its copy of a table costs its blocks, not the table (docs/design/sparse_tables.md).
  void release_other_rows() {
    for (std::size_t id = 0; id < shards_.partitions.size(); ++id) {
      const Partition& q = shards_.partitions[id];
      if (!keeps_own_rows(q.variable) || find(id)) continue;
      release_bytes(static_cast<char*>(shards_.variables[q.variable].raw_data()) + shards_.byte_offset(q), shards_.bytes(q));
    }
  }

  /// Runs `opt`'s kind of optimizer on this server's partitions of its parameters.
  void attach(const optim::Optimizer& opt) {
    for (const Tensor& p : opt.params()) {
      const std::ptrdiff_t v = shards_.index_of(p);
      STRATA_CHECK(v >= 0, "ParameterServerStrategy: an optimizer created under scope() over a parameter that was "
                   "not (create the model under the same strategy's scope() first)");
      for (std::size_t id : shards_.of_variable[static_cast<std::size_t>(v)])
        if (Held* h = find(id)) h->opt = opt.clone_for({h->value});
    }
  }

  /// What the first server's Dispatcher did in the last epoch that dispatched its batches.
  struct DispatchStats {
    std::int64_t batches = 0, completed = 0, repeated = 0, redispatched = 0;
  };
  const DispatchStats& dispatch_stats() const noexcept { return dispatch_stats_; }

  /// Serves requests until every worker has finished this epoch. `dispatched_batches` >= 0:
  /// the first server hands out the epoch's batches (ps::Dispatcher; Async).
  void serve_epoch(std::int64_t dispatched_batches = -1) {
    if (lost_.empty()) lost_.assign(static_cast<std::size_t>(workers_), 0);
    if (starts_at_.empty()) starts_at_.assign(static_cast<std::size_t>(workers_), 0);
    stale_done_.resize(static_cast<std::size_t>(workers_), 0);
    if (dispatched_batches >= 0 && me_ == 0) dispatcher_.emplace(dispatched_batches, lost_);
    // A worker lost in an earlier epoch takes no part, nor one that joins at a later epoch.
    // One that joined but has not said at which epoch (kCatchUpTag) holds the epoch's end.
    std::vector<char> done(lost_.size());
    for (std::size_t i = 0; i < done.size(); ++i) done[i] = lost_[i] || starts_at_[i] > epoch_;
    int finished = static_cast<int>(std::count(done.begin(), done.end(), 1));
    running_.assign(done.size(), 1);
    for (std::size_t i = 0; i < done.size(); ++i) running_[i] = !done[i] && starts_at_[i] >= 0;
    typename T::Message m;
    Backoff backoff(0, T::poll_window);
    auto last_check = std::chrono::steady_clock::now();
    while (finished < workers_) {
      // Replies move (MPI moves them only while polled), and pushes are still taken meanwhile:
      // a table block's reply rows leave only once the worker has every block's row count.
      const bool replying = T::poll_window.count() > 0 && progress_replies();
      if (!t_.probe(m)) {
        if (replying) {
          backoff.active();
          std::this_thread::yield();
          continue;
        }
        if (backoff.pause()) {
          const auto now = std::chrono::steady_clock::now();
          if (now - last_check > std::chrono::milliseconds(100)) {
            last_check = now;
            if (s_.sync) check_sync_deadline(now);
            // Async: a worker whose process is gone (on this host) is lost even if its
            // transport has not said so yet.
            for (std::size_t i = 0; !s_.sync && i < done.size(); ++i) {
              const int r = t_.roles().workers[i];
              if (!done[i] && runtime::is_gone(t_.peer_state(r))) finished += lose(r, done);
            }
          }
        }
        continue;
      }
      backoff.active();
      const auto& roles = t_.roles();
      STRATA_REQUIRE(!roles.is_server(m.source), invalid_argument, "strata.ps", "server rank ", t_.rank(),
                     ": a message from server rank ",
                     m.source, " (tag ", m.tag, ")");
      const int w = roles.index_of(m.source);
      if (m.tag == kWorkerLostTag) {
        finished += lose(m.source, done);
      } else if (m.tag == kWorkerJoinedTag) {
        admit(m.source);
        done.push_back(0);  // until it says at which epoch it joins
      } else if (m.tag == kCatchUpTag) {
        finished += catch_up(w, m, done);
      } else if (m.tag == kDoneTag) {
        char byte = 0;
        t_.receive(m, &byte);
        if (stale_done_[static_cast<std::size_t>(w)]) {  // the end of an epoch this server had ended: its values
          stale_done_[static_cast<std::size_t>(w)] = 0;
          send_values_to(m.source);
          continue;
        }
        if (!done[static_cast<std::size_t>(w)]) ++finished;
        done[static_cast<std::size_t>(w)] = 1;
        running_[static_cast<std::size_t>(w)] = 0;
        if (!s_.sync)
          for (Held& h : held_) release(h);
        if (dispatcher_) answer_batches(dispatcher_->leave(w));  // left early: what it held goes to the others
      } else if (m.tag == kBatchTag) {
        std::int64_t finished_batch = Dispatcher::kNone;
        STRATA_REQUIRE(dispatcher_.has_value() && m.bytes == sizeof finished_batch, invalid_argument, "strata.ps",
                       "server rank ", t_.rank(), ": worker rank ", m.source,
                       " asked for a batch, but this server does not hand out this epoch's batches");
        t_.receive(m, &finished_batch);
        answer_batches(dispatcher_->request(w, finished_batch));
      } else if (m.tag == kSaveTag) {
        std::int64_t step = 0;
        t_.receive(m, &step);
        std::int64_t crc = save_shard(step);
        auto ack = t_.isend(&crc, sizeof crc, m.source, kSaveAckTag);
        t_.wait_all(std::span(&ack, 1), std::chrono::steady_clock::now() + t_.timeout(), [&](const std::string& why) {
          t_.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", t_.rank(),
                                              ": the checkpoint answer to worker "
                   "rank ", m.source, " failed: ", why, "; aborting the job"));
        });
      } else if (m.tag == kLookupTag) {
        lookup(w, m);
      } else if (m.tag == kLearningRateTag) {
        double lr = 0;
        STRATA_REQUIRE(m.bytes == sizeof lr, invalid_argument, "strata.ps",
                       "a learning-rate message of the wrong size");
        t_.receive(m, &lr);
        for (Held& h : held_)
          if (h.opt) h.opt->set_lr(lr);
      } else {
        const int id = m.tag - kPushTag;
        Held* h = id >= 0 ? find(static_cast<std::size_t>(id)) : nullptr;
        STRATA_REQUIRE(h != nullptr, invalid_argument, "strata.ps", "server rank ", t_.rank(), ": worker rank ",
                       m.source,
                       " pushed to partition ", id, ", which this server does not hold (tag ", m.tag, ")");
        if (h->rows) {
          push_rows(*h, w, m);
          continue;
        }
        STRATA_REQUIRE(m.bytes == h->sum.nbytes(), invalid_argument, "strata.ps", "worker rank ", m.source, " pushed ",
                       m.bytes,
                       " bytes to partition ", id, " of ", h->sum.nbytes());
        if (s_.sync)
          push_sync(*h, w, m);
        else
          push_async(*h, w, m);
      }
    }
    for (Held& h : held_) {
      complete_replies(h);
      STRATA_REQUIRE(h.arrived == 0, invalid_argument, "strata.ps", "server rank ", t_.rank(),
                     ": the epoch ended with partition ", h.id,
                     " waiting for ", workers_ - h.arrived, " more pushes (the workers ran different numbers of steps)");
    }
    running_.clear();
    ++epoch_;
    if (dispatcher_) {
      dispatch_stats_ = {dispatcher_->batches(), dispatcher_->completed(), dispatcher_->repeated(),
                         dispatcher_->redispatched()};
      complete_batch_answers();
      dispatcher_.reset();
    }
  }

  /// Sends the values this server holds to every worker still in the job (the end of an
  /// epoch: each worker receives them straight into its variables; see Worker::receive_values).
  void send_values() {
    for (Held& h : held_) {
      for (std::size_t i = 0; i < lost_.size(); ++i)
        if (!lost_[i] && (starts_at_.empty() || (starts_at_[i] >= 0 && starts_at_[i] < epoch_))) {  // in the epoch ended
          h.replies.push_back(t_.isend(h.value.raw_data(), h.value.nbytes(), t_.roles().workers[i], static_cast<int>(h.id)));
          h.reply_to.push_back(t_.roles().workers[i]);
        }
      complete_replies(h);
    }
  }

  /// The sum of every live worker's `x` (their job_examples_per_s), sent back to each of them.
  /// Server 0 only; a worker lost meanwhile is left out.
  double sum_over_workers() {
    if (lost_.empty()) lost_.assign(static_cast<std::size_t>(workers_), 0);
    std::vector<char> have = lost_;
    double sum = 0;
    typename T::Message m;
    Backoff backoff(0, T::poll_window);
    auto last_check = std::chrono::steady_clock::now();
    while (std::count(have.begin(), have.end(), 1) < workers_) {
      if (!t_.probe(m)) {
        if (backoff.pause() && std::chrono::steady_clock::now() - last_check > std::chrono::milliseconds(100)) {
          last_check = std::chrono::steady_clock::now();
          for (std::size_t i = 0; i < have.size(); ++i)
            if (!have[i] && runtime::is_gone(t_.peer_state(t_.roles().workers[i]))) lose(t_.roles().workers[i], have);
        }
        continue;
      }
      backoff.active();
      if (m.tag == kWorkerJoinedTag) {  // after the last epoch: it takes no part
        admit(m.source);
        have.push_back(1);
        lost_.back() = 1;
        continue;
      }
      const std::size_t w = static_cast<std::size_t>(t_.roles().index_of(m.source));
      if (m.tag == kWorkerLostTag) {
        lose(m.source, have);
        continue;
      }
      if (lost_[w]) continue;  // one that joined after the last epoch: nothing to serve it
      STRATA_REQUIRE(m.tag == kRateTag, invalid_argument, "strata.ps", "server rank ", t_.rank(), ": worker rank ",
                     m.source,
                     " sent tag ", m.tag, " while the job sums its rates (the workers ran different numbers of epochs?)");
      double x = 0;
      t_.receive(m, &x);
      sum += x;
      have[w] = 1;
    }
    std::vector<typename T::Request> out;
    for (std::size_t i = 0; i < lost_.size(); ++i)
      if (!lost_[i]) out.push_back(t_.isend(&sum, sizeof sum, t_.roles().workers[i], kRateReplyTag));
    t_.wait_all(out, std::chrono::steady_clock::now() + t_.timeout(), [&](const std::string&) {});
    return sum;
  }

  /// Epochs served so far: the one being served, inside serve_epoch().
  std::int64_t epoch() const noexcept { return epoch_; }

  /// Writes the values this server holds into its copies of the variables (the rest zero).
  void values_into_variables() {
    // The held partitions are views of their variables already; the others become zeros.
    for (std::size_t id = 0; id < shards_.partitions.size(); ++id) {
      const Partition& q = shards_.partitions[id];
      if (find(id)) continue;
      char* at = static_cast<char*>(shards_.variables[q.variable].raw_data()) + shards_.byte_offset(q);
      if (keeps_own_rows(q.variable))
        release_bytes(at, shards_.bytes(q));
      else
        std::memset(at, 0, shards_.bytes(q));
    }
  }

  /// Where this server writes its checkpoint shards.
  void set_checkpoint_dir(std::filesystem::path dir) { checkpoint_dir_ = std::move(dir); }

  /// The shard file of server `server` (its index among the servers) at step `step`.
  static std::filesystem::path shard_path(const std::filesystem::path& dir, int server, std::int64_t step) {
    char name[64];
    std::snprintf(name, sizeof name, "ps-shard-%03d-%012lld.strata", server, static_cast<long long>(step));
    return dir / name;
  }

  /// Takes each held partition's value and optimizer state from shard `r` (written by
  /// save_shard on this server's index), checking every partition's name and shape before
  /// changing anything.
  void restore_shard(const checkpoint::Reader& r) {
    r.verify();
    for (const Held& h : held_) {
      const std::string key = "partition." + std::to_string(h.id) + ".value";
      const checkpoint::Entry* e = r.find(key);
      STRATA_REQUIRE(e != nullptr, invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "' has no '", key,
                     "': it was written with another placement of the variables");
      STRATA_REQUIRE(e->shape == h.value.shape() && e->dtype == h.value.dtype(), invalid_argument,
                     "strata.checkpoint.mismatch", "'", r.name(), "': '", key, "' is ", e->shape, " ",
                     name_of(e->dtype), ", this server holds ", h.value.shape(), " ", name_of(h.value.dtype()));
    }
    // Every partition's optimizer state read and checked before any partition changes; then
    // each partition's values straight into its place, and its slots adopted as read: the
    // shard is never held twice.
    std::vector<checkpoint::OptimizerState> states(held_.size());
    for (std::size_t k = 0; k < held_.size(); ++k) {
      if (!held_[k].opt) continue;
      states[k] = checkpoint::read_optimizer_state(r, "partition." + std::to_string(held_[k].id) + ".optimizer.");
      held_[k].opt->check_state(states[k].slots);
    }
    for (std::size_t k = 0; k < held_.size(); ++k) {
      Held& h = held_[k];
      checkpoint::read_into_tensor(r, "partition." + std::to_string(h.id) + ".value", h.value);
      if (h.opt) h.opt->adopt_state(std::move(states[k].slots), states[k].steps);
    }
  }

  /// Writes this server's shard at `step`; returns the file's CRC-32C.
  std::int64_t save_shard(std::int64_t step) {
    STRATA_REQUIRE(!checkpoint_dir_.empty(), invalid_argument, "strata.ps", "server rank ", t_.rank(),
                   ": asked for a checkpoint shard "
                   "without a checkpoint directory (TrainingCheckpoints sets it on every rank)");
    checkpoint::NamedTensors tensors;
    for (const Held& h : held_) {
      const std::string p = "partition." + std::to_string(h.id);
      tensors.emplace_back(p + ".value", h.value);
      if (h.opt) checkpoint::add_optimizer_state(tensors, p + ".optimizer.", *h.opt);
    }
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir_, ec);  // an error here shows in the write's message
    return checkpoint::write_checkpoint(shard_path(checkpoint_dir_, me_, step), tensors);  // streamed: no copy of the shard
  }

  /// The updates applied to partition `id` (held here) so far.
  std::int64_t updates(std::size_t id) const {
    const Held* h = find(id);
    return h && h->opt ? h->opt->steps() : 0;
  }

 private:
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

  const Held* find(std::size_t id) const {
    return id < slot_.size() && slot_[id] >= 0 ? &held_[static_cast<std::size_t>(slot_[id])] : nullptr;
  }
  Held* find(std::size_t id) { return const_cast<Held*>(std::as_const(*this).find(id)); }

  bool is_lost(int rank) const {
    return !lost_.empty() && lost_[static_cast<std::size_t>(t_.roles().index_of(rank))];
  }

  /// Tests the replies in flight; true while some are.
  bool progress_replies() {
    bool pending = false;
    for (Held& h : held_) {
      if (h.replies.empty()) continue;
      if (t_.test_all(h.replies)) {
        h.replies.clear();
        h.reply_to.clear();
      } else {
        pending = true;
      }
    }
    return pending;
  }

  /// Completes the replies of `h` in flight to worker rank `to` (only).
  void complete_replies_to(Held& h, int to) {
    if (is_lost(to)) return;
    std::size_t kept = 0;
    const auto deadline = std::chrono::steady_clock::now() + t_.timeout();
    for (std::size_t k = 0; k < h.replies.size(); ++k) {
      if (h.reply_to[k] != to) {
        if (kept != k) {
          h.replies[kept] = std::move(h.replies[k]);
          h.reply_to[kept] = h.reply_to[k];
        }
        ++kept;
        continue;
      }
      t_.wait_all(std::span(&h.replies[k], 1), deadline, [&](const std::string& why) {
        if (runtime::is_gone(runtime::settled_state([&] { return t_.peer_state(to); }))) return;
        t_.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", t_.rank(), ": the reply of partition ",
                                            h.id, " to worker rank ", to, " failed: ", why, "; aborting the job"));
      });
    }
    h.replies.resize(kept);
    h.reply_to.resize(kept);
  }

  void complete_replies(Held& h) {
    const auto deadline = std::chrono::steady_clock::now() + t_.timeout();
    for (std::size_t k = 0; k < h.replies.size(); ++k) {
      const int to = h.reply_to[k];
      if (is_lost(to)) continue;  // Async: dropped (a send to a dead peer may never complete)
      t_.wait_all(std::span(&h.replies[k], 1), deadline, [&](const std::string& why) {
        // Async: a reply to a worker that died is dropped (the loop hears of the loss).
        if (!s_.sync && runtime::is_gone(runtime::settled_state([&] { return t_.peer_state(to); }))) return;
        t_.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", t_.rank(),
                                            ": the reply of partition ", h.id, " to worker rank ", to, " failed: ",
                                            why, "; aborting the job"));
      });
    }
    h.replies.clear();
    h.reply_to.clear();
  }

  void update(Held& h) {
    STRATA_REQUIRE(h.opt != nullptr, invalid_argument, "strata.ps", "partition ", h.id, " (variable ",
                   shards_.partitions[h.id].variable,
                   ") has no optimizer: create the optimizer under the strategy's scope(), or set update_on_servers = "
                   "false");
    if (!h.rows) h.value.impl()->ag.grad = h.sum;  // a table block's gradient is already its rows
    const Tensor one[1] = {h.value};
    h.opt->apply_gradients(Gradients{one});
  }

  void reply(Held& h, int to_rank) {
    if (!lost_.empty() && lost_[static_cast<std::size_t>(t_.roles().index_of(to_rank))]) return;
    if (h.rows) {
      reply_rows(h, to_rank);
      return;
    }
    const Tensor& from = s_.update_on_servers ? h.value : h.sum;
    h.replies.push_back(t_.isend(from.raw_data(), from.nbytes(), to_rank, static_cast<int>(h.id)));
    h.reply_to.push_back(to_rank);
  }

  /// A worker that joined (kWorkerJoinedTag): the transport's, this server's and the
  /// dispatcher's state grow by one worker, which takes part from the epoch it names
  /// (catch_up).
  void admit(int r) {
    STRATA_REQUIRE(!s_.sync, invalid_argument, "strata.ps", "server rank ", t_.rank(), ": worker rank ", r,
                   " joined a Sync job, whose steps wait for a fixed set of workers");
    if (lost_.empty()) lost_.assign(static_cast<std::size_t>(workers_), 0);
    if (starts_at_.empty()) starts_at_.assign(static_cast<std::size_t>(workers_), 0);
    if constexpr (AdmitsWorkers<T>)
      t_.admit(r);
    else
      t_.abort(strata::detail::error_text("strata.ps", "server rank ", t_.rank(), ": this transport admits no workers"));
    ++workers_;
    lost_.push_back(0);
    starts_at_.push_back(-1);
    stale_done_.resize(static_cast<std::size_t>(workers_), 0);
    if (!running_.empty()) running_.push_back(0);
    for (Held& h : held_) {
      h.clock.push_back(0);
      if (!h.rows) continue;
      h.row_pushes.emplace_back();
      if (s_.remote_tables) h.lookups.emplace_back();
      h.worker_replies.emplace_back();
      h.dirty.emplace_back();
      h.dirty_rows.emplace_back();
    }
    if (dispatcher_) dispatcher_->admit();
    std::fprintf(stderr, "[strata.ps] server rank %d: worker rank %d joined; %ld workers\n", t_.rank(), r,
                 static_cast<long>(std::count(lost_.begin(), lost_.end(), 0)));
    std::fflush(stderr);
  }

  /// Worker w, which joined, names the epoch it joins at (the first server's, which the
  /// first server decides: its own), and takes the values held here. Returns 1 when w is
  /// thereby counted as finished with this epoch (it joins at the next).
  int catch_up(int w, typename T::Message& m, std::vector<char>& done) {
    const auto i = static_cast<std::size_t>(w);
    double named = -1;
    t_.receive(m, &named);
    STRATA_REQUIRE(starts_at_[i] == -1, invalid_argument, "strata.ps", "server rank ", t_.rank(), ": worker rank ",
                   m.source, " caught up twice");
    const std::int64_t e = me_ == 0 ? epoch_ : static_cast<std::int64_t>(named);
    int counted = 0;
    const auto live = std::count(lost_.begin(), lost_.end(), 0);  // the joiner among them
    if (me_ == 0 && s_.max_workers > 0 && live > s_.max_workers) {  // the first server decides
      std::fprintf(stderr, "[strata.ps] server rank %d: worker rank %d refused: the job has max_workers=%d workers\n",
                   t_.rank(), m.source, s_.max_workers);
      std::fflush(stderr);
      lost_[i] = 1;  // not counted, sent nothing more; its link closes as it ends
      done[i] = 1;
      std::int64_t& refusal = catch_up_replies_.emplace_back(kRefused);
      auto r = t_.isend(&refusal, sizeof refusal, m.source, kCatchUpReplyTag);
      t_.wait_all(std::span(&r, 1), std::chrono::steady_clock::now() + t_.timeout(), [](const std::string&) {});
      return 1;
    }
    if (e == epoch_) {  // in this epoch
      starts_at_[i] = e;
    } else if (e == epoch_ + 1) {  // in the next: this one may end without it
      starts_at_[i] = e;
      done[i] = 1;
      counted = 1;
    } else if (e == epoch_ - 1) {  // in the one this server ended before it joined: its end is stale here
      starts_at_[i] = epoch_;
      stale_done_[i] = 1;
    } else {
      t_.abort(strata::detail::error_text("strata.ps", "server rank ", t_.rank(), ": worker rank ", m.source,
                                          " joins at epoch ", e, ", this server serves epoch ", epoch_, "; aborting the job"));
    }
    if (!running_.empty()) running_[i] = !done[i];
    std::int64_t& reply = catch_up_replies_.emplace_back(e);  // a deque: the bytes stay put
    auto r = t_.isend(&reply, sizeof reply, m.source, kCatchUpReplyTag);
    t_.wait_all(std::span(&r, 1), std::chrono::steady_clock::now() + t_.timeout(), [](const std::string&) {});
    send_values_to(m.source);
    return counted;
  }

  /// This server's values to worker rank `r` alone (a joiner's catch-up, or the end of an
  /// epoch that this server had ended before the joiner named it).
  void send_values_to(int r) {
    for (Held& h : held_) {
      complete_replies_to(h, r);
      h.replies.push_back(t_.isend(h.value.raw_data(), h.value.nbytes(), r, static_cast<int>(h.id)));
      h.reply_to.push_back(r);  // completed before the values change (push_async), or at the epoch's end
    }
  }

  /// Async: takes worker rank `r` out of the job (its replies are dropped, the others no longer
  /// wait for it); Sync cannot complete a step without it. Returns 1 if it was still counted.
  // Sends each answer of the Dispatcher to its worker (one lost meanwhile fails its send,
  // tolerated: the loss is handled where the transport reports it).
  void answer_batches(const std::vector<Dispatcher::Answer>& answers) {
    for (const Dispatcher::Answer& a : answers) {
      answer_values_.push_back(a.batch);  // a deque: the bytes stay put until the send completes
      batch_answers_.push_back(
          t_.isend(&answer_values_.back(), sizeof(std::int64_t), t_.roles().workers[static_cast<std::size_t>(a.worker)],
                   kBatchReplyTag));
      batch_answer_to_.push_back(a.worker);
    }
    if (batch_answers_.size() > 64) complete_batch_answers();  // the workers posted their receives first
  }
  // Completes the batch answers in flight, but for those to workers lost meanwhile: a send
  // to a peer that died before it said it was ready to receive may never complete.
  void complete_batch_answers() {
    for (std::size_t k = 0; k < batch_answers_.size(); ++k)
      if (!lost_[static_cast<std::size_t>(batch_answer_to_[k])])
        t_.wait_all(std::span(&batch_answers_[k], 1), std::chrono::steady_clock::now() + t_.timeout(),
                    [](const std::string&) {});
    batch_answers_.clear();
    batch_answer_to_.clear();
    answer_values_.clear();
  }

  int lose(int r, std::vector<char>& done) {
    const auto i = static_cast<std::size_t>(t_.roles().index_of(r));
    if (s_.sync)
      t_.abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", t_.rank(), ": worker rank ", r,
                                          " is gone; a Sync step cannot complete without it; aborting the job"));
    if (lost_[i]) return 0;
    lost_[i] = 1;
    if (!running_.empty()) running_[i] = 0;
    const auto live = std::count(lost_.begin(), lost_.end(), 0);
    if (live < s_.min_workers) {
      std::string left;
      for (std::size_t k = 0; k < lost_.size(); ++k)
        if (!lost_[k]) left += (left.empty() ? "" : ", ") + std::to_string(t_.roles().workers[k]);
      t_.abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", t_.rank(), ": worker rank ", r,
                                          " is gone; ", live, " worker", live == 1 ? "" : "s", " left, below min_workers=",
                                          s_.min_workers, ": left [", left, "]; aborting the job"));
    }
    std::fprintf(stderr, "[strata.ps.peer_lost] server rank %d: worker rank %d is gone; Async carries on with %ld worker%s\n",
                 t_.rank(), r, static_cast<long>(live), live == 1 ? "" : "s");
    std::fflush(stderr);
    for (Held& h : held_) {
      std::erase(h.waiting, r);
      release(h);
    }
    if (dispatcher_) answer_batches(dispatcher_->lost(static_cast<int>(i)));  // its batches go to the others
    const int counted = done[i] ? 0 : 1;
    done[i] = 1;
    return counted;
  }

  void push_sync(Held& h, int w, typename T::Message& m) {
    if (h.arrived == 0) {
      complete_replies(h);  // the previous step's replies may still read the sum or value
      h.first = std::chrono::steady_clock::now();
    }
    t_.receive(m, w == 0 ? h.sum.raw_data() : h.pushes[static_cast<std::size_t>(w - 1)].raw_data());
    h.waiting.push_back(m.source);
    if (++h.arrived < workers_) return;
    strata::detail::visit_floating(h.sum.dtype(), "parameter server sum", [&](auto tag) {
      using E = decltype(tag);
      for (const Tensor& p : h.pushes)  // in worker order, whatever order they came in
        collective::detail::combine<E>(ReduceOp::Sum, static_cast<std::size_t>(h.sum.numel()), h.sum.template data<E>(),
                                       p.template data<E>());
    });
    if (s_.update_on_servers) update(h);
    for (int r : h.waiting) reply(h, r);
    h.waiting.clear();
    h.arrived = 0;
  }

  /// A push of a table block's rows (see the file comment): received and checked, then, under
  /// Sync at the W-th, combined in worker order and applied; under Async applied at once.
  void push_rows(Held& h, int w, typename T::Message& m) {
    const std::int64_t n = h.value.dim(0), width = h.rows;
    const std::size_t es = size_of(h.value.dtype());
    const std::size_t most = static_cast<std::size_t>(2 + n) * 8 + static_cast<std::size_t>(n * width) * es;
    // A malformed push is a broken or hostile worker: the job ends at once, naming it (a throw
    // would leave the workers waiting for this server until their deadlines).
    const auto refuse = [&](const auto&... why) {
      t_.abort(strata::detail::error_text("strata.ps", "server rank ", t_.rank(), ": worker rank ", m.source,
                                          " pushed a malformed row message to table partition ", h.id, " (", why...,
                                          "); aborting the job"));
    };
    if (m.bytes < 16 || m.bytes > most) refuse(m.bytes, " bytes, a block of ", n, " rows takes 16 to ", most);
    if (s_.sync && h.arrived == 0) {
      complete_replies(h);  // the previous step's replies still read reply_rows
      h.first = std::chrono::steady_clock::now();
    }
    std::vector<std::int64_t>& in = h.row_pushes[static_cast<std::size_t>(w)];
    in.resize((m.bytes + 7) / 8);
    t_.receive(m, in.data());
    const std::int64_t k = in[0];
    if (k < 0 || k > n || m.bytes != static_cast<std::size_t>(2 + k) * 8 + static_cast<std::size_t>(k * width) * es)
      refuse(k, " rows claimed in ", m.bytes, " bytes, a block of ", n, " rows");
    for (std::int64_t j = 0; j < k; ++j)
      if (const std::int64_t r = in[static_cast<std::size_t>(2 + j)]; r < 0 || r >= n)
        refuse("row ", r, " of a block of ", n, " rows");
    h.waiting.push_back(m.source);
    if (!s_.sync) {
      apply_rows(h, std::span(&in, 1));
      ++h.clock[static_cast<std::size_t>(w)];
      release(h);
      return;
    }
    if (++h.arrived < workers_) return;
    const std::int64_t c = apply_rows(h, h.row_pushes);
    const std::size_t row_bytes = static_cast<std::size_t>(width) * es;
    for (int r : h.waiting) {
      if (!lost_.empty() && lost_[static_cast<std::size_t>(t_.roles().index_of(r))]) continue;
      h.replies.push_back(t_.isend(&h.reply_count, sizeof h.reply_count, r, static_cast<int>(h.id)));
      h.reply_to.push_back(r);
      if (c == 0) continue;
      h.replies.push_back(t_.isend(h.reply_rows.data(), static_cast<std::size_t>(c) * (8 + row_bytes), r, static_cast<int>(h.id)));
      h.reply_to.push_back(r);
    }
    h.waiting.clear();
    h.arrived = 0;
  }

  /// Combines `pushes` (checked row messages) in their order into the block's row gradient
  /// and applies it. Sync: writes the reply into reply_count and reply_rows (the summed rows
  /// where the workers update, else the changed rows' new values); returns its row count.
  /// Async: marks the changed rows dirty for every live worker (reply() sends each worker its
  /// own); returns 0.
  std::int64_t apply_rows(Held& h, std::span<const std::vector<std::int64_t>> pushes) {
    const std::int64_t n = h.value.dim(0), width = h.rows;
    const std::size_t es = size_of(h.value.dtype());
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
    if (s_.update_on_servers) {
      h.opt->set_sparse_updates(lazy ? optim::SparseUpdates::lazy : optim::SparseUpdates::dense);
      auto& ag = h.value.impl()->ag;
      ag.grad_index = index;
      ag.grad_rows = sums;
      update(h);
    }
    if (!s_.sync) {  // the changed rows: the lazy rule's, or every row (the dense rule moves them all)
      for (std::size_t i = 0; !s_.remote_tables && i < h.dirty.size(); ++i) {  // (remote: looked up instead)
        if (!lost_.empty() && lost_[i]) continue;
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
      return 0;
    }
    // Sync's reply: the summed rows (the workers update), the changed rows (the lazy rule),
    // every row (the dense rule moves rows without a gradient too), or none (remote tables:
    // the workers look up what they read).
    const std::int64_t c = s_.remote_tables ? 0 : s_.update_on_servers && !lazy ? n : kept;
    h.reply_count = c;
    h.reply_rows.resize(static_cast<std::size_t>(c) + (static_cast<std::size_t>(c * width) * es + 7) / 8);
    std::int64_t* rows = h.reply_rows.data();
    if (c == kept)
      std::copy_n(row_index_.data(), c, rows);
    else if (c == n)
      for (std::int64_t r = 0; r < n; ++r) rows[r] = r;
    const Tensor& from = s_.update_on_servers ? h.value : sums;
    copy_rows(from, s_.update_on_servers ? rows : nullptr, c, width * static_cast<std::int64_t>(es),
              reinterpret_cast<char*>(rows + c));
    return c;
  }

  /// Copies rows `rows[0..c)` of `from` (or its first c rows, where rows is null) to `to`.
  static void copy_rows(const Tensor& from, const std::int64_t* rows, std::int64_t c, std::int64_t row_bytes,
                        char* to) {
    const char* base = static_cast<const char*>(from.raw_data());
    const auto rb = static_cast<std::size_t>(row_bytes);
    if (!rows) {
      if (c > 0) std::memcpy(to, base, static_cast<std::size_t>(c) * rb);
      return;
    }
    for (std::int64_t j = 0; j < c; ++j) std::memcpy(to + static_cast<std::size_t>(j) * rb, base + static_cast<std::size_t>(rows[j]) * rb, rb);
  }

  /// A worker's lookup in a remote table's block, [id, k, k row numbers in the block], checked
  /// before anything is read from it, answered with the k rows' values (kLookupReplyTag). In
  /// Sync it comes between the worker's steps, so it reads the values of the last update.
  void lookup(int w, typename T::Message& m) {
    const auto refuse = [&](const auto&... why) {
      t_.abort(strata::detail::error_text("strata.ps", "server rank ", t_.rank(), ": worker rank ", m.source,
                                          " sent a malformed lookup (", why..., "); aborting the job"));
    };
    const std::size_t most = static_cast<std::size_t>(2 + most_rows_) * 8;
    if (!s_.remote_tables) refuse("this job's tables are not remote");
    if (m.bytes < 24 || m.bytes > most || m.bytes % 8 != 0) refuse(m.bytes, " bytes, this server's lookups take 24 to ", most);
    lookup_in_.resize(m.bytes / 8);
    t_.receive(m, lookup_in_.data());
    const std::int64_t id = lookup_in_[0], k = lookup_in_[1];
    Held* h = id >= 0 ? find(static_cast<std::size_t>(id)) : nullptr;
    if (h == nullptr || h->rows == 0) refuse("partition ", id, " is no table block of this server");
    const std::int64_t n = h->value.dim(0);
    if (k < 1 || k > n || m.bytes != static_cast<std::size_t>(2 + k) * 8)
      refuse(k, " rows claimed in ", m.bytes, " bytes, a block of ", n, " rows");
    for (std::int64_t j = 0; j < k; ++j)
      if (const std::int64_t r = lookup_in_[static_cast<std::size_t>(2 + j)]; r < 0 || r >= n)
        refuse("row ", r, " of a block of ", n, " rows");
    complete_replies_to(*h, m.source);  // its last lookup here (received before it asked again)
    const std::size_t row_bytes = static_cast<std::size_t>(h->rows) * size_of(h->value.dtype());
    std::vector<char>& out = h->lookups[static_cast<std::size_t>(w)];
    out.resize(static_cast<std::size_t>(k) * row_bytes);
    copy_rows(h->value, lookup_in_.data() + 2, k, static_cast<std::int64_t>(row_bytes), out.data());
    h->replies.push_back(t_.isend(out.data(), out.size(), m.source, kLookupReplyTag));
    h->reply_to.push_back(m.source);
  }

  /// Async: a table block's reply to worker rank `to_rank`, in its own buffers: the count,
  /// then every row changed since its last reply (its own push's among them) with its value.
  void reply_rows(Held& h, int to_rank) {
    const auto i = static_cast<std::size_t>(t_.roles().index_of(to_rank));
    auto& list = h.dirty_rows[i];
    auto& marks = h.dirty[i];
    const std::int64_t c = static_cast<std::int64_t>(list.size()), width = h.rows;
    const std::size_t es = size_of(h.value.dtype()), row_bytes = static_cast<std::size_t>(width) * es;
    // Its own buffers, so replies to the others in flight do not hold this one up: a worker
    // posts the receive of its rows only once it has every block's count.
    complete_replies_to(h, to_rank);  // (its previous reply: received before it pushed again)
    typename Held::Reply& out = h.worker_replies[i];
    out.count = c;
    out.rows.resize(static_cast<std::size_t>(c) + (static_cast<std::size_t>(c) * row_bytes + 7) / 8);
    std::copy_n(list.data(), c, out.rows.data());
    copy_rows(h.value, out.rows.data(), c, static_cast<std::int64_t>(row_bytes), reinterpret_cast<char*>(out.rows.data() + c));
    for (std::int64_t r : list) marks[static_cast<std::size_t>(r)] = 0;
    list.clear();
    h.replies.push_back(t_.isend(&out.count, sizeof out.count, to_rank, static_cast<int>(h.id)));
    h.reply_to.push_back(to_rank);
    if (c == 0) return;
    h.replies.push_back(t_.isend(out.rows.data(), static_cast<std::size_t>(c) * (8 + row_bytes), to_rank, static_cast<int>(h.id)));
    h.reply_to.push_back(to_rank);
  }

  void push_async(Held& h, int w, typename T::Message& m) {
    complete_replies(h);  // replies of the old values must leave before they change
    t_.receive(m, h.sum.raw_data());
    update(h);
    ++h.clock[static_cast<std::size_t>(w)];
    h.waiting.push_back(m.source);
    release(h);
  }

  /// Async: sends the held replies whose workers are within the staleness bound.
  void release(Held& h) {
    if (h.waiting.empty() || s_.sync) return;
    std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < h.clock.size(); ++i)
      if (running_.empty() || running_[i]) slowest = std::min(slowest, h.clock[i]);
    std::erase_if(h.waiting, [&](int r) {
      const std::int64_t ahead = h.clock[static_cast<std::size_t>(t_.roles().index_of(r))] - slowest;
      if (s_.staleness >= 0 && slowest != std::numeric_limits<std::int64_t>::max() && ahead > s_.staleness)
        return false;
      reply(h, r);
      return true;
    });
  }

  /// Sync: a step that has some pushes and waited past the timeout for the rest names who is missing.
  void check_sync_deadline(std::chrono::steady_clock::time_point now) {
    for (const Held& h : held_) {
      if (h.arrived == 0 || now - h.first < t_.timeout()) continue;
      std::ostringstream os;
      os << strata::detail::error_text("strata.ps.timeout") << "server rank " << t_.rank() << ": partition " << h.id << " has " << h.arrived << " of "
         << workers_ << " pushes of its step after " << std::chrono::duration<double>(t_.timeout()).count()
         << " s; missing:";
      for (int r : t_.roles().workers) {
        if (std::find(h.waiting.begin(), h.waiting.end(), r) != h.waiting.end()) continue;
        os << " worker rank " << r << runtime::describe_state(t_.peer_state(r));
      }
      t_.abort(os.str() + "; aborting the job");
    }
  }

  T& t_;
  const Shards& shards_;
  Settings s_;
  int me_, workers_;
  std::vector<Held> held_;
  std::vector<int> slot_;        // partition id -> index in held_, or -1
  std::vector<char> running_;    // Async: workers not yet done with the epoch (empty: all)
  std::vector<char> lost_;       // Async: workers gone from the job
  std::vector<std::int64_t> starts_at_;  // Async: the epoch each worker takes part from (-1: joined, not said yet)
  std::vector<char> stale_done_;  // Async: a joiner's next kDoneTag ends an epoch this server had ended
  std::deque<std::int64_t> catch_up_replies_;
  std::int64_t epoch_ = 0;        // epochs served
  std::optional<Dispatcher> dispatcher_;  // the first server, an epoch with dispatched batches
  std::deque<std::int64_t> answer_values_;
  std::vector<typename T::Request> batch_answers_;
  std::vector<int> batch_answer_to_;  // the worker of each
  DispatchStats dispatch_stats_;
  std::filesystem::path checkpoint_dir_;
  std::vector<std::int64_t> row_slot_, row_index_;  // combining a table block's rows (kernels/cpu/rows.hpp)
  std::vector<std::int64_t> lookup_in_;  // the lookup being answered
  std::int64_t most_rows_ = 0;           // rows of the largest table block held
};

}  // namespace strata::ps

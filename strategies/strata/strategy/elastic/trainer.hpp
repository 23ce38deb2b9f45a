/// \file
/// strata::elastic::Trainer: the loop of an elastic job (docs/elastic.md), for a model trained
/// with MultiWorkerMirroredStrategy<C> (or ShardedStrategy<C, Stage>) on a dataset every worker
/// holds. Each generation of the membership builds its strategy under the generation's prefix,
/// takes the training state of its member 0 (a survivor; no disk), sets the learning rate by
/// the user's rule when the worker count changed, and trains from the last completed step, its
/// rows cut from each epoch by global offset (GlobalOrder). A lost peer, one that stops
/// answering, or a joiner ends the generation at a step boundary.
///
/// Under ShardedStrategy no rank holds the whole state, and a lost rank's shard is gone with
/// it: the state moves through a sharded checkpoint in TrainOptions::checkpoint_dir instead,
/// saved every `checkpoint_every` steps and at each change seen at a step boundary, and each
/// generation restores the newest one resharded onto its members (after a loss, the steps
/// since it are trained again).
///
///   elastic::Trainer<collective::Gloo> trainer(data::fashion_mnist_train(), options);
///   elastic::Trainer<collective::Gloo, ShardedStrategy<collective::Gloo>> sharded(data, options);
///   auto model = trainer.run(make_model, make_optimizer, [&](auto& strategy, auto& model, auto& opt,
///                                                            const data::Batch& b) { ... strategy.run(...) ... });
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/checkpoint/training_state.hpp>
#include <strata/collective/options.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/checkpointing.hpp>
#include <strata/strategy/detail/shared_checkpoint.hpp>
#include <strata/strategy/elastic/global_order.hpp>
#include <strata/strategy/elastic/member.hpp>
#include <strata/strategy/multi_worker_mirrored.hpp>
#include <strata/strategy/sharded.hpp>

namespace strata::elastic {

/// A change of the worker count, for the learning-rate rule.
struct Resize {
  std::uint64_t generation = 0;  ///< the generation that starts
  int from = 0, to = 0;          ///< workers before and now
  double lr = 0;                 ///< the learning rate before
};

/// The default rule: the learning rate stays. Each step's gradient is the mean over its
/// global batch, so its scale does not change with the worker count; only its noise does.
inline double keep_lr(const Resize& r) { return r.lr; }
/// The linear scaling rule (Goyal et al.; Horovod's usual reset callback): the learning rate
/// follows the global batch, which follows the worker count.
inline double scale_lr_linearly(const Resize& r) { return r.lr * r.to / r.from; }

struct TrainOptions {
  std::int64_t per_replica_batch = 32;  ///< fixed; the global batch is workers × this
  std::int64_t epochs = 1;
  std::uint64_t seed = 0;  ///< each epoch's order of the examples
  /// The learning rate of a generation whose worker count differs from the last one's.
  std::function<double(const Resize&)> on_resize = keep_lr;
  /// The strategy's options; split_update is turned off (a failed step must leave every
  /// worker's copy whole, for the survivor whose state goes on).
  MultiWorkerOptions strategy{};
  collective::Options collective = collective::Options::from_env();
  /// The longest wait for a view (joining, or the next generation).
  std::chrono::milliseconds membership_timeout{60'000};
  /// After a failed step, how long the survivors wait for each member to say it still
  /// answers before they report the silent ones (Member::census). Every rank waiting in the
  /// failed collective times out within about a step of the first: a longer window for steps
  /// longer than a second.
  std::chrono::milliseconds census_window = Member::kCensusWindow;
  /// ShardedStrategy's wrap units (stage 3).
  ShardOptions sharding{};
  /// Under ShardedStrategy (required there): the directory, one every worker sees, of the
  /// sharded checkpoints the state moves through. A job started over a directory that holds
  /// one resumes from it.
  std::filesystem::path checkpoint_dir;
  /// Under ShardedStrategy: a checkpoint every this many steps (after a loss the steps since
  /// the last one are trained again), besides the one at each change of membership.
  std::int64_t checkpoint_every = 50;
};

/// Where the loop stands: at a step (for the step's body and for logging), and at the start
/// of a generation.
struct Progress {
  std::uint64_t generation = 0;
  int rank = 0, workers = 0;
  std::int64_t step = 0;                  ///< steps completed before this one, over the whole run
  std::int64_t epoch = 0, offset = 0;     ///< the epoch, and the global offset its step starts at
  std::span<const std::int64_t> rows;     ///< this rank's examples of the step (indices in the dataset)
  bool first_of_generation = false;       ///< the generation's first step
  std::string resumed_after = "the start";  ///< why this generation began
};

template <class C, class S = MultiWorkerMirroredStrategy<C>>
class Trainer {
  /// Whether the strategy shards the training state (its state moves through checkpoints).
  static constexpr bool kSharded = strata::detail::ShardsTrainingState<S>;
  static_assert(std::is_base_of_v<MultiWorkerMirroredStrategy<C>, S>,
                "elastic::Trainer<C, S>: S is MultiWorkerMirroredStrategy<C> or ShardedStrategy<C, Stage>");

 public:
  /// Joins the elastic job (strata-run --elastic) and waits for the first view that holds
  /// this process. Every worker holds the same `data`.
  Trainer(data::TensorDataset data, TrainOptions o)
      : data_(std::move(data)), o_(std::move(o)), member_(o_.membership_timeout), order_(data_.size(), o_.seed) {
    STRATA_CHECK(o_.per_replica_batch > 0 && o_.epochs > 0, "elastic::Trainer: per_replica_batch ",
                 o_.per_replica_batch, " and epochs ", o_.epochs, " must be positive");
    STRATA_CHECK(static_cast<bool>(o_.on_resize), "elastic::Trainer: on_resize is empty (keep_lr is the default)");
    STRATA_CHECK(o_.census_window.count() > 0, "elastic::Trainer: census_window must be positive, got ",
                 o_.census_window.count(), " ms");
    if constexpr (kSharded) {
      STRATA_REQUIRE(!o_.checkpoint_dir.empty(), invalid_argument, "strata.elastic",
                     "elastic::Trainer over ShardedStrategy: TrainOptions::checkpoint_dir is empty; no rank holds the "
                     "whole state, so it moves between generations through a sharded checkpoint there");
      STRATA_REQUIRE(o_.checkpoint_every > 0, invalid_argument, "strata.elastic",
                     "elastic::Trainer: checkpoint_every must be positive, got ", o_.checkpoint_every);
    }
  }

  /// Called at each generation once its communicator is built and the state in place, before
  /// its first step (logging: progress() says where it resumes).
  void on_generation(std::function<void(const Progress&)> f) { on_generation_ = std::move(f); }

  /// Trains for the options' epochs; returns the model as the last generation left it, the
  /// same on every worker. `make_model()` builds the model (in the strategy's scope),
  /// `make_optimizer(model)` its optimizer (by value, at the initial learning rate), and
  /// `step(strategy, model, opt, batch)` runs one step on this rank's rows (batch.global_size:
  /// the step's examples on all workers).
  template <class MakeModel, class MakeOptimizer, class Step>
  std::invoke_result_t<MakeModel&> run(MakeModel&& make_model, MakeOptimizer&& make_optimizer, Step&& step) {
    std::vector<unsigned char> state;  // the last generation's state, in memory
    for (;;) {
      p_.generation = member_.generation();
      p_.rank = member_.rank();
      p_.workers = member_.size();
      // A failure before the first step (a peer lost while the communicator is built or the
      // state shared) leaves `state` as the last generation left it: nothing trained since.
      try {
        MultiWorkerOptions mo = o_.strategy;
        mo.split_update = UpdateSplit::off;
        collective::Options co = o_.collective;
        co.rendezvous_abandoned = [this] { return member_.superseded(); };
        S strategy = make_strategy(mo, co);
        auto model = strategy.scope(make_model);
        // (in the scope: under ShardedStrategy it then updates this rank's shards)
        auto opt = strategy.scope([&] { return make_optimizer(model); });
        if constexpr (kSharded) {
          TrainingCheckpoints<S, decltype(model), decltype(opt)> saved(strategy, model, opt, o_.checkpoint_dir, 2);
          restore_sharded(strategy, opt, saved);
          begin_generation();
          bool changed = false;
          while (order_.epoch() < o_.epochs && !changed) {
            train_step(strategy, model, opt, step);
            changed = member_.changed(strategy);
            // At a change every member of this generation stands at the same step boundary:
            // the next one takes the state from here, nothing lost (unless a member is gone,
            // which fails the save: the next one takes the last checkpoint).
            if (changed || p_.step % o_.checkpoint_every == 0) save_sharded(opt, saved);
          }
          if (!changed) {
            strategy.detach(model.parameters());  // (stage 3: whole, and no hook of the strategy left in it)
            return model;
          }
        } else {
          if (member_.generation() > 1) restore(strategy, model, opt, state);  // member 0 is a survivor
          begin_generation();
          bool changed = false;
          try {
            while (order_.epoch() < o_.epochs && !changed) {
              train_step(strategy, model, opt, step);
              changed = member_.changed(strategy);
            }
          } catch (const error&) {
            state = capture(model, opt);  // as of the last step this process completed
            throw;
          }
          if (!changed) return model;
          state = capture(model, opt);
        }
        p_.resumed_after = "a change of membership";
      } catch (const collective_error& e) {  // a peer lost
        after_failure(e);
      } catch (const timeout_error& e) {  // a peer that does not answer
        after_failure(e);
      }
      member_.next();
    }
  }

  const Member& member() const noexcept { return member_; }
  /// Where the loop stands (inside step(): the step being run).
  const Progress& progress() const noexcept { return p_; }

 private:
  /// After a failed collective: the census of who still answers decides the next view; a
  /// failure the membership cannot mend (everyone answers, nobody lost) is rethrown.
  void after_failure(const error& e) {
    p_.resumed_after = std::string("a failed step: ") + e.what();
    if (!member_.census(o_.census_window)) throw;
  }

  S make_strategy(const MultiWorkerOptions& mo, const collective::Options& co) {
    if constexpr (kSharded)
      return S(mo, o_.sharding, member_.process(), member_.prefix(), co);
    else
      return S(mo, member_.process(), member_.prefix(), co);
  }
  void begin_generation() {
    p_.epoch = order_.epoch();
    p_.offset = order_.offset();
    p_.first_of_generation = true;
    if (on_generation_) on_generation_(p_);
  }

  template <class Model, class Opt, class Step>
  void train_step(S& strategy, Model& model, Opt& opt, Step& step) {
    const int n = strategy.num_replicas_in_sync();
    rows_ = order_.rows(strategy.rank(), o_.per_replica_batch);
    p_.rows = rows_;
    p_.epoch = order_.epoch();
    p_.offset = order_.offset();
    data::Batch b;
    const auto count = static_cast<std::int64_t>(rows_.size());
    b.x = data::detail::gather_rows(data_.x, rows_.data(), count);
    if (data_.y.defined()) b.y = data::detail::gather_rows(data_.y, rows_.data(), count);
    for (const Tensor& in : data_.more_inputs) b.more_inputs.push_back(data::detail::gather_rows(in, rows_.data(), count));
    b.size = count;
    b.global_size = order_.step_rows(n, o_.per_replica_batch);
    b.epoch = order_.epoch();
    b.index = p_.step;
    b.global_offset = std::min<std::int64_t>(b.global_size, strategy.rank() * o_.per_replica_batch);
    step(strategy, model, opt, static_cast<const data::Batch&>(b));
    order_.advance(n, o_.per_replica_batch);
    ++p_.step;
    p_.first_of_generation = false;
  }

  template <class Model, class Opt>
  std::vector<unsigned char> capture(Model& model, Opt& opt) {
    checkpoint::NamedTensors t = checkpoint::capture_training_state(
        model.parameters(), opt, {p_.step, order_.epoch(), order_.offset()}, p_.workers,
        strata::detail::generators_of(model), strata::detail::buffers_of(model));
    t.emplace_back("elastic.lr", full({}, opt.lr(), DType::f64));
    return checkpoint::encode(t);
  }

  // The state of member 0 (a survivor) on every member: its small tensors in one message, each
  // parameter and optimizer slot straight into the others' (strata::detail::share_checkpoint).
  template <class Model, class Opt>
  void restore(S& strategy, Model& model, Opt& opt, const std::vector<unsigned char>& state) {
    std::optional<checkpoint::Reader> survivor;
    if (strategy.is_chief() && !state.empty())
      survivor.emplace(state, "the state of generation " + std::to_string(member_.generation() - 1));
    const std::optional<checkpoint::Reader> shared = strata::detail::share_checkpoint(strategy, std::move(survivor));
    STRATA_REQUIRE(shared.has_value(), collective_error, "strata.elastic", "generation ", member_.generation(),
                   " has no survivor of an earlier one: nobody holds the training state");
    const checkpoint::Reader& r = *shared;
    const int from = static_cast<int>(r.read("replicas").item());
    const checkpoint::TrainingPosition pos = checkpoint::restore_training_state(
        r, model.parameters(), opt, from, strata::detail::generators_of(model), strata::detail::buffers_of(model));
    p_.step = pos.step;
    order_.seek(pos.epoch, pos.batch);  // `batch` holds the epoch's global offset here
    resume_lr(opt, from, strategy.num_replicas_in_sync(), r.read("elastic.lr").item());
  }
  // The learning rate `lr` of a state saved by `from` workers, on `to`: by the user's rule
  // where the count changed.
  template <class Opt>
  void resume_lr(Opt& opt, int from, int to, double lr) {
    opt.set_lr(from == to ? lr : o_.on_resize(Resize{member_.generation(), from, to, lr}));
  }

  // The newest checkpoint in checkpoint_dir, resharded onto this generation's members, with
  // the learning rate and worker count it was saved at (member 0's record of them: it saved
  // or restored that checkpoint in its last generation; a job begun from a checkpoint of an
  // earlier one keeps make_optimizer's rate). With none, the job starts: its first
  // checkpoint is its initial state, so a loss before the next one restarts from step 0.
  template <class Opt, class Saved>
  void restore_sharded(S& strategy, Opt& opt, Saved& saved) {
    const std::optional<checkpoint::TrainingPosition> pos = saved.restore(RestoreOptions{.any_replica_count = true});
    double at[3] = {-1, 0, 0};  // (known, lr, workers) of the step restored, as member 0 recorded them
    if (pos && strategy.rank() == 0)
      if (const auto it = saved_at_.find(pos->step); it != saved_at_.end())
        at[0] = 1, at[1] = it->second.first, at[2] = it->second.second;
    strategy.broadcast_from_chief(at, sizeof at);
    saved_at_.clear();
    if (!pos) {
      p_.step = 0;
      order_.seek(0, 0);
      save_sharded(opt, saved);
      return;
    }
    p_.step = pos->step;
    order_.seek(pos->epoch, pos->batch);  // `batch` holds the epoch's global offset here
    const int to = strategy.num_replicas_in_sync();
    if (at[0] > 0) resume_lr(opt, static_cast<int>(at[2]), to, at[1]);
    saved_at_[pos->step] = {opt.lr(), to};
  }
  // A checkpoint of this step, its learning rate and worker count recorded first (a manifest
  // exists only where every member reached its save).
  template <class Opt, class Saved>
  void save_sharded(Opt& opt, Saved& saved) {
    saved_at_[p_.step] = {opt.lr(), p_.workers};
    saved.save({p_.step, order_.epoch(), order_.offset()});
  }

  data::TensorDataset data_;
  TrainOptions o_;
  Member member_;
  GlobalOrder order_;
  Progress p_;
  std::vector<std::int64_t> rows_;
  std::function<void(const Progress&)> on_generation_;
  std::map<std::int64_t, std::pair<double, int>> saved_at_;  // sharded: each checkpoint's step -> (lr, workers)
};

}  // namespace strata::elastic

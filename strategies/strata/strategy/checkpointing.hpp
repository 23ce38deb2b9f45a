/// \file
/// TrainingCheckpoints: saving and resuming a training run under any strategy. The chief
/// writes (CheckpointManager: atomic, the newest `keep` kept); on restore the chief picks the
/// newest complete checkpoint and its tensors go to every process (a strategy across processes
/// sends them through its collective as they are read: detail::share_checkpoint), and every
/// local replica's model and optimizer take them — so all replicas resume from one file, identically. A strategy whose
/// state lives on other ranks too (ParameterServerStrategy<Sync>: the servers' optimizer
/// state) adds per-rank shard files, written before the chief's file indexes them
/// (checkpoint_shards, restore_shards, prune_shards). A strategy that shards the training
/// state itself (ShardedStrategy) has every rank write its shard of the parameters and the
/// optimizer state, and the chief a manifest of them (checkpoint/state_shards.hpp); any
/// strategy restores such a state on any number of ranks.
#pragma once

#include <concepts>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/checkpoint/manager.hpp>
#include <strata/checkpoint/state_shards.hpp>
#include <strata/checkpoint/training_state.hpp>
#include <strata/strategy/detail/shared_checkpoint.hpp>
#include <strata/strategy/gathered_parameters.hpp>
#include <strata/strategy/replicated.hpp>

namespace strata {

/// Whether TrainingCheckpoints captures strategy S whole (a strategy whose optimizer state
/// lives elsewhere, like ParameterServerStrategy's on its servers, opts out until it can).
template <class S>
inline constexpr bool checkpoints_supported = true;

namespace detail {
/// A strategy across processes that tells every process whether the chief's save failed.
template <class S>
concept SharesSaveOutcome = requires(S& s, std::string& error) { s.share_save_outcome(error); };
/// A strategy whose state also lives on other ranks (ParameterServerStrategy<Sync>'s servers):
/// per-rank shard files beside the chief's checkpoint, which records them.
template <class S>
concept ShardedCheckpoints = requires(S& s, const S& cs, const std::filesystem::path& dir, const checkpoint::Reader& r,
                                      std::int64_t step, const std::vector<std::int64_t>& kept) {
  s.set_checkpoint_dir(dir);
  cs.check_shards(r, dir, step);
  s.restore_shards(r, dir, step);
  { s.checkpoint_shards(step) } -> std::convertible_to<checkpoint::NamedTensors>;
  s.prune_shards(dir, kept);
};

/// A strategy whose ranks each hold the optimizer state of a range of every parameter
/// (ShardedStrategy): each rank saves its shard of the training state (collective; what the
/// chief's manifest records of the shards comes back on every rank), and restores the state
/// of its ranges.
template <class S>
concept ShardsTrainingState = requires(S& s, const S& cs, std::span<const Tensor> params, const optim::Optimizer& opt,
                                       const std::filesystem::path& dir, std::int64_t step) {
  { cs.state_ranges(params) } -> std::convertible_to<std::vector<optim::ElementRange>>;
  { s.save_state_shards(dir, step, params, opt) } -> std::convertible_to<checkpoint::NamedTensors>;
};

template <class T>
struct IsReplicated : std::false_type {};
template <class T>
struct IsReplicated<Replicated<T>> : std::true_type {};

/// Replica r's object of `x` (a Replicated, or the one object of a one-copy strategy).
template <class T>
auto& local_copy(T& x, std::size_t r) {
  if constexpr (IsReplicated<T>::value)
    return x.replica(r);
  else
    return (void)r, x;
}
template <class T>
std::size_t local_copies(const T& x) {
  if constexpr (IsReplicated<T>::value)
    return x.num_replicas();
  else
    return (void)x, 1;
}
/// A model's own generators (a Module's Dropout layers), or none: what a training state saves.
template <class M>
std::vector<Generator*> generators_of(M& m) {
  if constexpr (requires { m.generators(); })
    return m.generators();
  else
    return {};
}
/// A model's buffers (a Module's BatchNorm running statistics), or none.
template <class M>
std::vector<Tensor> buffers_of(M& m) {
  if constexpr (requires { m.buffers(); })
    return m.buffers();
  else
    return {};
}
}  // namespace detail

/// What TrainingCheckpoints::restore does when the directory holds checkpoints and none of
/// them reads.
enum class UnreadableCheckpoints {
  error,         ///< an error naming each file and why; nothing changes (the default)
  start_afresh,  ///< set them all aside (kept, never pruned) and train from step 0
};

/// How TrainingCheckpoints::restore treats what it finds.
struct RestoreOptions {
  UnreadableCheckpoints unreadable = UnreadableCheckpoints::error;
  /// Restores a checkpoint written with another number of replicas in sync too, its
  /// optimizer state resharded to this job's (a sharded state's shards are read by element
  /// range). Only for a loop that keeps its global batch whatever the replica count: the
  /// position counts global batches. Off: such a checkpoint is refused, naming both counts.
  bool any_replica_count = false;
};

template <class S, class Model, class Opt>
class TrainingCheckpoints {
  static_assert(checkpoints_supported<S>, "TrainingCheckpoints: this strategy's state is not captured yet "
                                          "(ParameterServerStrategy keeps optimizer state on its servers)");

 public:
  TrainingCheckpoints(S& strategy, Model& model, Opt& opt, std::filesystem::path dir, int keep = 3)
      : s_(strategy), model_(model), opt_(opt), manager_(std::move(dir), keep) {
    if constexpr (detail::ShardedCheckpoints<S>) s_.set_checkpoint_dir(manager_.directory());
  }

  /// Resumes from the newest complete checkpoint, if there is one: every replica's model and
  /// optimizer, and the default generator. Returns where to continue, or nothing when the
  /// directory holds no checkpoint. Checkpoints newer than the one restored that do not read
  /// are set aside (CheckpointManager::set_aside: kept, never pruned or overwritten) and
  /// named on stderr. A directory whose checkpoints all fail to read is an error on every
  /// process naming each file and why, and nothing changes, unless `unreadable` is
  /// UnreadableCheckpoints::start_afresh: then they are all set aside and training starts
  /// from step 0.
  std::optional<checkpoint::TrainingPosition> restore(
      UnreadableCheckpoints unreadable = UnreadableCheckpoints::error) {
    return restore(RestoreOptions{.unreadable = unreadable});
  }
  /// restore() as `o` says: a checkpoint of another replica count too (resharded), where
  /// `o.any_replica_count`. A sharded state (a manifest and a shard file per rank that saved
  /// it) restores under any strategy: each process reads the elements it holds of each
  /// parameter and optimizer slot from the shards that hold them.
  std::optional<checkpoint::TrainingPosition> restore(const RestoreOptions& o) {
    const UnreadableCheckpoints unreadable = o.unreadable;
    std::optional<checkpoint::Reader> found;
    std::string error;  // the chief's, when no checkpoint of those present reads
    if (s_.is_chief()) {
      std::vector<checkpoint::CheckpointManager::Unreadable> skipped;
      // A checkpoint whose shards are missing or damaged is skipped for the one before.
      auto also = [&](const checkpoint::Reader& r, std::int64_t step) {
        if constexpr (detail::ShardedCheckpoints<S>) s_.check_shards(r, manager_.directory(), step);
        if (checkpoint::is_sharded_state(r)) checkpoint::StateSource(r, manager_.directory(), step).verify();
      };
      found = manager_.open_latest(skipped, also);
      if (!found && !skipped.empty() && unreadable == UnreadableCheckpoints::error) {
        error = "'" + manager_.directory().string() + "' holds " + std::to_string(skipped.size()) +
                " checkpoint(s) and none can be read:";
        for (const auto& u : skipped) error += "\n  " + u.file.string() + ": " + u.why;
        error += "\nNothing was restored or changed. Recover or remove them, or restore with "
                 "UnreadableCheckpoints::start_afresh (the trainers: --start-afresh) to train from step 0 "
                 "with them set aside";
      } else {
        for (const auto& u : skipped)
          std::fprintf(stderr, "[strata.checkpoint] skipping %s: %s; kept as %s\n", u.file.string().c_str(),
                       u.why.c_str(), manager_.set_aside(u.file).string().c_str());
      }
    }
    // Across processes, every process reads the chief's file through the chief, a tensor at
    // a time (detail::share_checkpoint): no process holds a copy of the file.
    std::optional<checkpoint::Reader> opened;
    if constexpr (detail::SharesChiefTensors<S>)
      opened = detail::share_checkpoint(s_, std::move(found), error);
    else if (!error.empty())
      STRATA_THROW(data_error, "strata.checkpoint.unreadable", error);
    else
      opened = std::move(found);
    if (!opened) return std::nullopt;
    const checkpoint::Reader& r = *opened;
    // A sharded state's parameters and optimizer slots come from its shards, each process
    // reading its elements of them (the directory is one every process sees).
    std::optional<checkpoint::StateSource> shards;
    if (checkpoint::is_sharded_state(r))
      shards.emplace(r, manager_.directory(), r.read("position").template data<std::int64_t>()[0]);
    const std::optional<int> replicas =
        o.any_replica_count ? std::nullopt : std::optional<int>(s_.num_replicas_in_sync());
    checkpoint::TrainingPosition pos;
    for (std::size_t k = 0; k < detail::local_copies(model_); ++k) {
      auto& model = detail::local_copy(model_, k);
      const auto params = model.parameters();
      std::vector<optim::ElementRange> ranges;
      if constexpr (detail::ShardsTrainingState<S>) ranges = s_.state_ranges(params);
      // (parameters sharded between uses are whole while the restore writes them)
      const GatheredParameters whole = gather_parameters(s_, params);
      pos = checkpoint::restore_training_state(r, params, detail::local_copy(opt_, k), replicas,
                                               detail::generators_of(model), detail::buffers_of(model),
                                               shards ? &*shards : nullptr, ranges);
    }
    // State held off the chief (ParameterServerStrategy's servers): each rank takes its part.
    if constexpr (detail::ShardedCheckpoints<S>)
      s_.restore_shards(r, manager_.directory(), pos.step);
    return pos;
  }

  /// Writes the run's state at `pos` (the chief writes; every replica holds the same values).
  /// Called where the training loop's body runs (ParameterServerStrategy: the workers; the
  /// chief then asks the serving servers for their shards), or by every rank outside an epoch.
  void save(const checkpoint::TrainingPosition& pos) {
    checkpoint::NamedTensors shards;  // written (and answered for) before the index that records them
    if constexpr (detail::ShardedCheckpoints<S>) shards = s_.checkpoint_shards(pos.step);
    if constexpr (detail::ShardsTrainingState<S>)  // every rank's shard of the state; a failure stops every rank
      shards = s_.save_state_shards(manager_.directory(), pos.step, detail::local_copy(model_, 0).parameters(),
                                    detail::local_copy(opt_, 0));
    std::string error;  // the chief's, when its write failed (a full disk, a read-only directory)
    std::exception_ptr failure;
    if (s_.is_chief()) {
      try {
        auto& model = detail::local_copy(model_, 0);
        auto tensors = detail::ShardsTrainingState<S>
                           ? checkpoint::capture_manifest(detail::local_copy(opt_, 0), pos, s_.num_replicas_in_sync(),
                                                          detail::generators_of(model), detail::buffers_of(model))
                           : checkpoint::capture_training_state(model.parameters(), detail::local_copy(opt_, 0), pos,
                                                                s_.num_replicas_in_sync(), detail::generators_of(model),
                                                                detail::buffers_of(model));
        tensors.insert(tensors.end(), shards.begin(), shards.end());
        manager_.save(pos.step, tensors);
        // The shards of the steps no checkpoint keeps go; those of checkpoints set aside stay with them.
        std::vector<std::int64_t> kept = manager_.steps();
        for (std::int64_t step : manager_.set_aside_steps()) kept.push_back(step);
        if constexpr (detail::ShardedCheckpoints<S>) s_.prune_shards(manager_.directory(), kept);
        checkpoint::prune_state_shards(manager_.directory(), kept);
      } catch (const std::exception& e) {
        error = e.what();
        failure = std::current_exception();
      }
    }
    // Every process learns the outcome (a strategy across processes shares it), so a failed
    // save stops every rank with the reason rather than leaving the others at their next
    // collective.
    if constexpr (detail::SharesSaveOutcome<S>) s_.share_save_outcome(error);
    if (failure) std::rethrow_exception(failure);
    if (!error.empty())
      STRATA_THROW(io_error, "strata.checkpoint", "step ", pos.step, " was not saved: the chief failed: ", error);
  }

  const checkpoint::CheckpointManager& manager() const noexcept { return manager_; }

 private:
  S& s_;
  Model& model_;
  Opt& opt_;
  checkpoint::CheckpointManager manager_;
};

}  // namespace strata

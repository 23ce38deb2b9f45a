/// \file
/// The trainers' checkpoints, from the shared flags: none without --checkpoint-dir, else
/// strata::TrainingCheckpoints in that directory — resumed from at the start (the chief says
/// where; with --global-batch, from a checkpoint of any replica count), saved every
/// --checkpoint-every steps and at the end.
#pragma once

#include <cstdio>
#include <optional>
#include <type_traits>
#include <string>

#include <strata/strata.hpp>

#include "run_flags.hpp"

namespace trainer {

template <strata::Strategy S, class Model, class Opt>
class Checkpoints {
 public:
  Checkpoints(S& strategy, Model& model, Opt& opt, const RunFlags& f) : s_(strategy), f_(f) {
    // (a strategy without checkpoints, an asynchronous parameter server, is refused the flag)
    if constexpr (strata::checkpoints_supported<S>)
      if (!f.checkpoint_dir.empty()) c_.emplace(strategy, model, opt, f.checkpoint_dir);
    (void)model, (void)opt;
  }

  bool enabled() const noexcept { return c_.has_value(); }

  /// Where training starts: the newest complete checkpoint's position, or step 0.
  strata::checkpoint::TrainingPosition resume() {
    if constexpr (strata::checkpoints_supported<S>) {
      if (!c_) return {};
      // With --global-batch the position means the same rows on any replica count.
      const auto at = c_->restore(strata::RestoreOptions{
          .unreadable = f_.start_afresh ? strata::UnreadableCheckpoints::start_afresh : strata::UnreadableCheckpoints::error,
          .any_replica_count = f_.global_batch > 0});
      if (!at) return {};
      if (s_.is_chief())
        std::printf("resumed from step %lld (epoch %lld, batch %lld) in %s\n", static_cast<long long>(at->step),
                    static_cast<long long>(at->epoch), static_cast<long long>(at->batch), f_.checkpoint_dir.c_str());
      return *at;
    }
    return {};
  }

  /// The step that leaves the run at `pos` is done: saved when --checkpoint-every says so.
  void after_step(const strata::checkpoint::TrainingPosition& pos) {
    if constexpr (strata::checkpoints_supported<S>)
      if (c_ && f_.checkpoint_every > 0 && pos.step % f_.checkpoint_every == 0) c_->save(pos);
  }
  /// Training ended at `pos`.
  void finish(const strata::checkpoint::TrainingPosition& pos) {
    if constexpr (strata::checkpoints_supported<S>)
      if (c_) c_->save(pos);
  }

 private:
  using Managed = std::conditional_t<strata::checkpoints_supported<S>, strata::TrainingCheckpoints<S, Model, Opt>, int>;
  S& s_;
  const RunFlags& f_;
  std::optional<Managed> c_;
};

}  // namespace trainer

/// \file
/// ps::server::ShardFiles<T>: a server's checkpoint shards — on the chief's kSaveTag(step)
/// each held partition's value and optimizer state to `DIR/ps-shard-SERVER-STEP.strata`
/// (atomically), answered with the file's CRC-32C, which the chief's index records; and a
/// shard read back, every partition checked before any changes.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/training_state.hpp>  // add_optimizer_state, read_optimizer_state
#include <strata/strategy/parameter_server/checkpoint_index.hpp>  // shard_path
#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>  // the tags
#include <strata/support/error.hpp>

namespace strata::ps::server {

template <class T>
class ShardFiles {
 public:
  explicit ShardFiles(State<T>& st) : st_(st) {}

  /// Where this server writes its checkpoint shards.
  void set_dir(std::filesystem::path dir) { dir_ = std::move(dir); }

  /// The chief's kSaveTag(step): the shard written, its CRC-32C the answer.
  void on_save(typename T::Message& m) {
    std::int64_t step = 0;
    st_.t.receive(m, &step);
    std::int64_t crc = save(step);
    auto ack = st_.t.isend(&crc, sizeof crc, m.source, kSaveAckTag);
    st_.t.wait_all(std::span(&ack, 1), std::chrono::steady_clock::now() + st_.t.timeout(), [&](const std::string& why) {
      st_.t.abort(strata::detail::error_text("strata.ps.timeout", "server rank ", st_.t.rank(),
                                             ": the checkpoint answer to worker rank ", m.source, " failed: ", why,
                                             "; aborting the job"));
    });
  }

  /// Writes this server's shard at `step`; returns the file's CRC-32C.
  std::int64_t save(std::int64_t step) {
    STRATA_REQUIRE(!dir_.empty(), invalid_argument, "strata.ps", "server rank ", st_.t.rank(),
                   ": asked for a checkpoint shard "
                   "without a checkpoint directory (TrainingCheckpoints sets it on every rank)");
    checkpoint::NamedTensors tensors;
    for (const Held<T>& h : st_.held) {
      const std::string p = "partition." + std::to_string(h.id);
      tensors.emplace_back(p + ".value", h.value);
      if (h.opt) checkpoint::add_optimizer_state(tensors, p + ".optimizer.", *h.opt);
    }
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);  // an error here shows in the write's message
    return checkpoint::write_checkpoint(shard_path(dir_, st_.me, step), tensors);  // streamed: no copy of the shard
  }

  /// Takes each held partition's value and optimizer state from shard `r` (written by save on
  /// this server's index), checking every partition's name and shape before changing anything.
  void restore(const checkpoint::Reader& r) {
    r.verify();
    for (const Held<T>& h : st_.held) {
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
    std::vector<checkpoint::OptimizerState> states(st_.held.size());
    for (std::size_t k = 0; k < st_.held.size(); ++k) {
      if (!st_.held[k].opt) continue;
      states[k] = checkpoint::read_optimizer_state(r, "partition." + std::to_string(st_.held[k].id) + ".optimizer.");
      st_.held[k].opt->check_state(states[k].slots);
    }
    for (std::size_t k = 0; k < st_.held.size(); ++k) {
      Held<T>& h = st_.held[k];
      checkpoint::read_into_tensor(r, "partition." + std::to_string(h.id) + ".value", h.value);
      if (h.opt) h.opt->adopt_state(std::move(states[k].slots), states[k].steps);
    }
  }

 private:
  State<T>& st_;
  std::filesystem::path dir_;
};

}  // namespace strata::ps::server

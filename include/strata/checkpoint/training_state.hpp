/// \file
/// A training run's state as named checkpoint tensors, and back: the parameters
/// ("param.<i>"), the optimizer's slots ("optimizer.<slot>.<i>"), step count and loss scale
/// ("optimizer.loss_scale": the scale and its finite steps in a row, where it has one), the data
/// position and step ("position": step, epoch, batch in epoch), the default generator
/// ("rng") and the replicas in sync ("replicas"). restore_training_state() checks the whole
/// file and every shape before it changes anything, so a mismatch fails before training.
///
/// Buffers (BatchNorm's running statistics, Module::buffers()) are saved as "buffer.<i>".
/// Generators that modules own (Dropout's, Module::generators()) are saved as "generator.<i>"
/// when given: the seeds of a Dropout's keyed masks (and, outside a strategy's steps, where
/// its draws have got to), so a model with dropout resumes drawing the masks it would have drawn.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <cmath>    // std::floor
#include <exception>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/state_shards.hpp>
#include <strata/data/dataset.hpp>  // Batch
#include <strata/nn/init.hpp>  // default_generator
#include <strata/optim/optimizer.hpp>
#include <strata/tensor/factory.hpp>
#include <strata/tensor/random.hpp>

namespace strata::checkpoint {

/// Where a run is: `step` steps taken, and the next batch to train, batch `batch` of epoch
/// `epoch` (the batches of `epoch` before it are done; after an epoch's last batch the
/// position is {epoch + 1, 0}). Pipeline::set_position(epoch, batch) resumes there.
struct TrainingPosition {
  std::int64_t step = 0, epoch = 0, batch = 0;

  /// The position once the step that trained `b` is done: a step more, and the batch after
  /// b's, the next epoch's first when b was the last of its epoch's `batches_per_epoch`
  /// (what the range distribute() returned says: `data.num_batches()`).
  TrainingPosition after(const data::Batch& b, std::int64_t batches_per_epoch) const {
    const bool last = b.index + 1 >= batches_per_epoch;
    return {step + 1, last ? b.epoch + 1 : b.epoch, last ? 0 : b.index + 1};
  }
};

/// A generator's state as a checkpoint tensor (4 x int64).
inline Tensor generator_tensor(const Generator& g) {
  const auto st = g.state();
  Tensor r = Tensor::empty({4}, DType::i64);
  std::memcpy(r.raw_data(), st.data(), sizeof st);
  return r;
}

/// Appends `opt`'s slots as "<prefix><slot>" (unless `slots` is false: a sharded state's
/// shards hold them), its step count as "<prefix>steps" and, where it has a loss scale, the
/// scale and its finite steps in a row as "<prefix>loss_scale" (float64 [2]).
inline void add_optimizer_state(NamedTensors& out, const std::string& prefix, const optim::Optimizer& opt,
                                bool slots = true) {
  if (slots)
    for (const auto& [name, t] : opt.state()) out.emplace_back(prefix + name, t);
  out.emplace_back(prefix + "steps", full({}, static_cast<double>(opt.steps()), DType::i64));
  if (const auto& ls = opt.loss_scale())
    out.emplace_back(prefix + "loss_scale",
                     from_vector<double>({2}, {ls->scale(), static_cast<double>(ls->clean_steps())}));
}

/// What add_optimizer_state() wrote under `prefix`: the slots (named without the prefix), the
/// step count and the loss scale (scale, finite steps), for Optimizer::load_state.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> slots;
  std::int64_t steps = 0;
  std::optional<std::pair<double, std::int64_t>> loss_scale;
};
/// The step count and loss scale add_optimizer_state() wrote under `prefix`, without the slots.
inline OptimizerState read_optimizer_counts(const Reader& r, const std::string& prefix) {
  OptimizerState st;
  st.steps = static_cast<std::int64_t>(r.read(prefix + "steps").item());
  if (r.find(prefix + "loss_scale")) {
    const Tensor ls = r.read(prefix + "loss_scale");
    STRATA_REQUIRE(ls.numel() == 2 && ls.dtype() == DType::f64, invalid_argument, "strata.checkpoint", "'", r.name(),
                   "': malformed ", prefix, "loss_scale");
    const auto v = ls.to_vector<double>();
    STRATA_REQUIRE(v[1] >= 0 && v[1] == std::floor(v[1]), invalid_argument, "strata.checkpoint", "'", r.name(),
                   "': malformed ", prefix, "loss_scale (", v[1], " finite steps)");
    st.loss_scale.emplace(v[0], static_cast<std::int64_t>(v[1]));
  }
  return st;
}
inline OptimizerState read_optimizer_state(const Reader& r, const std::string& prefix) {
  OptimizerState st = read_optimizer_counts(r, prefix);
  for (const Entry& e : r.entries())
    if (e.name.rfind(prefix, 0) == 0 && e.name != prefix + "steps" && e.name != prefix + "loss_scale")
      st.slots.emplace_back(e.name.substr(prefix.size()), r.read(e.name));
  return st;
}

namespace detail {
inline NamedTensors capture_state(std::span<const Tensor> params, const optim::Optimizer& opt, TrainingPosition pos,
                                  int replicas, std::span<Generator* const> generators, std::span<const Tensor> buffers,
                                  bool whole) {
  NamedTensors out;
  if (whole)
    for (std::size_t i = 0; i < params.size(); ++i) out.emplace_back("param." + std::to_string(i), params[i]);
  for (std::size_t i = 0; i < buffers.size(); ++i) out.emplace_back("buffer." + std::to_string(i), buffers[i]);
  add_optimizer_state(out, "optimizer.", opt, whole);
  out.emplace_back("position", from_vector<std::int64_t>({3}, {pos.step, pos.epoch, pos.batch}));
  out.emplace_back("rng", generator_tensor(default_generator()));
  for (std::size_t i = 0; i < generators.size(); ++i)
    out.emplace_back("generator." + std::to_string(i), generator_tensor(*generators[i]));
  out.emplace_back("replicas", full({}, replicas, DType::i64));
  return out;
}
}  // namespace detail

inline NamedTensors capture_training_state(std::span<const Tensor> params, const optim::Optimizer& opt,
                                           TrainingPosition pos, int replicas,
                                           std::span<Generator* const> generators = {},
                                           std::span<const Tensor> buffers = {}) {
  return detail::capture_state(params, opt, pos, replicas, generators, buffers, /*whole=*/true);
}

/// A sharded training state's manifest: what capture_training_state() names but for the
/// parameters and the optimizer's slots, which each rank's shard holds (capture_state_shard);
/// the caller adds the shards' records (shard_records).
inline NamedTensors capture_manifest(const optim::Optimizer& opt, TrainingPosition pos, int replicas,
                                     std::span<Generator* const> generators = {}, std::span<const Tensor> buffers = {}) {
  return detail::capture_state({}, opt, pos, replicas, generators, buffers, /*whole=*/false);
}

/// The names "<prefix>0", "<prefix>1", ... of `r`'s tensors, exactly as many as `like` has,
/// each of its counterpart's shape and dtype (checked from the index: nothing is read); a
/// mismatch is named (`what`: what the model calls them).
inline std::vector<std::string> keys_like(const Reader& r, const std::string& prefix, std::span<const Tensor> like,
                                          const char* what) {
  std::size_t saved = 0;
  while (r.find(prefix + std::to_string(saved))) ++saved;
  if (saved != like.size())
    STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "' holds ", saved, " ", what,
                 ", the model has ", like.size());
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < like.size(); ++i) {
    std::string key = prefix + std::to_string(i);
    const Entry& e = r.entry(key);
    if (e.shape != like[i].shape() || e.dtype != like[i].dtype()) {
      std::ostringstream os;
      os << strata::detail::error_text("strata.checkpoint.mismatch") << "shape mismatch for '" << key << "': "
         << e.shape << " " << name_of(e.dtype) << " in '" << r.name() << "' vs " << like[i].shape() << " "
         << name_of(like[i].dtype()) << " in the model";
      throw invalid_argument(os.str());
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

/// Restores what capture_training_state() saved into `params` (in place), `opt` and the
/// default generator; returns the position to resume from. The names, shapes and small
/// tensors are all checked before anything changes; the parameters and buffers are then
/// read straight into the model, one at a time.
///
/// `replicas`: the replicas in sync of this run, which must be the checkpoint's (none: any
/// count, for a restore that reshards; the caller keeps the global batch, which the position
/// counts in). `state`: where the parameters and the optimizer's slots are read from, the
/// shards a sharded state's manifest `r` records (none: `r`'s own tensors). `ranges`: the
/// elements of each parameter `opt`'s state covers where it holds shards (hold_shards); its
/// slots are read for those elements alone.
inline TrainingPosition restore_training_state(const Reader& r, std::span<const Tensor> params, optim::Optimizer& opt,
                                               std::optional<int> replicas, std::span<Generator* const> generators = {},
                                               std::span<const Tensor> buffers = {}, const StateSource* state = nullptr,
                                               std::span<const optim::ElementRange> ranges = {}) {
  r.verify();
  STRATA_REQUIRE(state != nullptr || !is_sharded_state(r), invalid_argument, "strata.checkpoint", "'", r.name(),
                 "' is the manifest of a sharded training state: restore it with TrainingCheckpoints, or pass the "
                 "StateSource of its shards");
  const std::optional<StateSource> own = state ? std::nullopt : std::optional<StateSource>(std::in_place, r);
  const StateSource& src = state ? *state : *own;
  STRATA_CHECK(ranges.empty() || ranges.size() == params.size(), "restore_training_state: ", ranges.size(),
               " ranges for ", params.size(), " parameters");
  auto scalar = [&](const char* key) { return static_cast<std::int64_t>(r.read(key).item()); };
  const std::int64_t saved_replicas = scalar("replicas");
  if (replicas && saved_replicas != *replicas)
    STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "' was written with ", saved_replicas,
                 " replicas in sync, this run has ", *replicas, " (the global batch and data order would differ)");
  // How many of "<prefix>0", "<prefix>1", ... the file holds.
  auto count = [&](const std::string& prefix) {
    std::size_t n = 0;
    while (r.find(prefix + std::to_string(n))) ++n;
    return n;
  };
  if (src.params() != params.size())
    STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "' holds ", src.params(),
                 " parameters, the model has ", params.size());
  for (std::size_t i = 0; i < params.size(); ++i) src.check_param(i, params[i]);
  const std::vector<std::string> buffer_keys =
      keys_like(r, "buffer.", buffers, "buffers (BatchNorm's running statistics)");
  OptimizerState optimizer = read_optimizer_counts(r, "optimizer.");
  // The slots: an ordinary checkpoint's as they are (every process reads each of them whole,
  // in the file's order), or this process's elements of each.
  for (const std::string& key : src.slot_keys()) {
    const std::string name = key.substr(std::string("optimizer.").size());
    const std::int64_t i = slot_index(name);
    STRATA_REQUIRE(i >= 0 && static_cast<std::size_t>(i) < params.size(), invalid_argument,
                   "strata.checkpoint.mismatch", "'", r.name(), "' holds optimizer state '", name,
                   "' of no parameter of the model's ", params.size());
    const auto k = static_cast<std::size_t>(i);
    if (!src.sharded() && ranges.empty()) {
      optimizer.slots.emplace_back(name, r.read(key));
      continue;
    }
    const optim::ElementRange range = ranges.empty() ? optim::ElementRange{0, params[k].numel()} : ranges[k];
    const Tensor& like = opt.updated(k);
    STRATA_CHECK(like.numel() == range.end - range.begin, "restore_training_state: range [", range.begin, ", ",
                 range.end, ") of parameter ", k, " for an optimizer that updates ", like.numel(), " of its elements");
    if (src.sharded() && !src.holds(key, k, range)) continue;  // no state of these elements yet
    Tensor t = Tensor::empty(like.shape(), like.dtype());
    src.read_into(key, k, range, t);
    if (like.device().kind != DeviceKind::cpu) t = t.to(like.device());  // (the state lives by its parameter)
    if (range.end > range.begin) optimizer.slots.emplace_back(name, std::move(t));
  }
  const Tensor pos = r.read("position"), rng = r.read("rng");
  STRATA_REQUIRE(pos.numel() == 3 && pos.dtype() == DType::i64 && rng.numel() == 4 && rng.dtype() == DType::i64,
                 invalid_argument, "strata.checkpoint",
                 "'", r.name(), "': malformed position or rng");
  const std::size_t saved_generators = count("generator.");
  if (saved_generators != generators.size())
    STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "' holds ", saved_generators,
                 " module generators (Dropout layers), the model has ", generators.size());
  std::vector<Tensor> generator_states;
  for (std::size_t i = 0; i < generators.size(); ++i) {
    Tensor g = r.read("generator." + std::to_string(i));
    STRATA_REQUIRE(g.numel() == 4 && g.dtype() == DType::i64, invalid_argument, "strata.checkpoint", "'", r.name(),
                   "': malformed generator.",
                   i);
    generator_states.push_back(std::move(g));
  }
  const bool restores_scale = optimizer.loss_scale && opt.loss_scale();
  if (restores_scale) {  // checked on a copy before anything changes
    optim::LossScale check = *opt.loss_scale();
    try {
      check.restore(optimizer.loss_scale->first, optimizer.loss_scale->second);
    } catch (const std::exception& e) {
      STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "'", r.name(), "': ", e.what());
    }
  }
  opt.adopt_state(std::move(optimizer.slots), optimizer.steps);  // checks every slot before changing any
  if (restores_scale)
    opt.restore_loss_scale(optimizer.loss_scale->first, optimizer.loss_scale->second);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string key = "param." + std::to_string(i);
    const Tensor& p = params[i];
    if (!src.sharded()) {
      read_into_tensor(r, key, p);
    } else if (p.device().kind == DeviceKind::cpu && p.is_contiguous()) {
      src.read_into(key, i, {0, p.numel()}, p);
    } else {
      Tensor host = Tensor::empty(p.shape(), p.dtype());
      src.read_into(key, i, {0, p.numel()}, host);
      NoGradGuard no_grad;
      Tensor(p).copy_(host.to(p.device()));
    }
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) read_into_tensor(r, buffer_keys[i], buffers[i]);
  auto set = [](Generator& g, const Tensor& t) {
    std::array<std::uint64_t, 4> st{};
    std::memcpy(st.data(), t.raw_data(), sizeof st);
    g.set_state(st);
  };
  set(default_generator(), rng);
  for (std::size_t i = 0; i < generators.size(); ++i) set(*generators[i], generator_states[i]);
  const auto* q = pos.template data<std::int64_t>();
  return {q[0], q[1], q[2]};
}

}  // namespace strata::checkpoint

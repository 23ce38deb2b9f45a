// A training state saved in shards (checkpoint/state_shards.hpp), one process playing the
// ranks that saved it: restored whole (one device) and by element range (an optimizer holding
// another number of ranks' shards), bit for bit against the state that was saved; an ordinary
// checkpoint restored by range; a damaged or missing shard named and its checkpoint skipped;
// another replica count refused unless asked for; the shards of pruned steps removed.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <strata/checkpoint/state_shards.hpp>
#include <strata/checkpoint/training_state.hpp>
#include <strata/strata.hpp>

#include "doctest.hpp"
#include "support/damage.hpp"

namespace ck = strata::checkpoint;
using strata::Tensor;
using strata::optim::ElementRange;

// (a namespace of its own: the unit tests are one translation unit)
namespace state_shards {

struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("strata_state_shards_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

strata::nn::Sequential mlp(std::uint64_t seed) {
  using namespace strata::nn;
  strata::manual_seed(seed);
  return Sequential(Linear(12, 16), ReLU(), Linear(16, 4));
}

/// Three steps of Adam on one device, so every parameter has state.
void train(strata::nn::Sequential& m, strata::optim::Adam& opt) {
  strata::Generator g(5);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = strata::uniform({8, 12}, -1, 1, g);
    std::vector<std::int64_t> labels(8);
    for (auto& l : labels) l = static_cast<std::int64_t>(g.below(4));
    const Tensor loss = strata::nn::cross_entropy(m(x), strata::from_vector<std::int64_t>({8}, labels));
    opt.apply_gradients(strata::grad(loss, m.parameters()));
  }
}

/// Rank k of `ranks`: elements [k n / ranks, (k + 1) n / ranks) of each parameter of n
/// elements, but the whole of parameter 1 (the first bias) on the last rank.
std::vector<ElementRange> ranges_of(const std::vector<Tensor>& params, int k, int ranks) {
  std::vector<ElementRange> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t n = params[i].numel();
    if (i == 1)
      out.push_back(k == ranks - 1 ? ElementRange{0, n} : ElementRange{0, 0});
    else
      out.push_back({k * n / ranks, (k + 1) * n / ranks});
  }
  return out;
}

/// The state saved by `ranks` ranks at `step`: a shard file each, then the manifest.
void save_sharded(const std::filesystem::path& dir, std::int64_t step, const std::vector<Tensor>& params,
                  const strata::optim::Optimizer& opt, int ranks, int replicas) {
  std::filesystem::create_directories(dir);
  std::vector<std::int64_t> crcs;
  for (int k = 0; k < ranks; ++k)
    crcs.push_back(ck::write_checkpoint(ck::state_shard_path(dir, k, ranks, step),
                                        ck::capture_state_shard(params, ranges_of(params, k, ranks), opt)));
  auto manifest = ck::capture_manifest(opt, {step, 0, step}, replicas);
  for (auto& t : ck::shard_records(params, crcs)) manifest.push_back(std::move(t));
  ck::CheckpointManager(dir).save(step, manifest);
}

std::vector<std::vector<float>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

/// The slot `name` ("m.3") of `opt`, or an empty vector.
std::vector<float> slot(const strata::optim::Optimizer& opt, const std::string& name) {
  for (const auto& [n, t] : opt.state())
    if (n == name) return t.to_vector<float>();
  return {};
}

/// An Adam holding rank k of `ranks`' shards of `params` (views of their ranges).
strata::optim::Adam sharded_adam(const std::vector<Tensor>& params, const std::vector<ElementRange>& ranges) {
  strata::optim::Adam opt(params, 0.01);
  std::vector<Tensor> shards;
  for (std::size_t i = 0; i < params.size(); ++i) shards.push_back(ck::detail::flat_range(params[i], ranges[i]));
  opt.hold_shards(shards);
  return opt;
}

/// Each slot of `got` (holding `ranges`) against elements `ranges` of `want`'s, bit for bit.
void check_state_ranges(const strata::optim::Optimizer& got, const strata::optim::Optimizer& want,
                        const std::vector<ElementRange>& ranges) {
  std::size_t expected = 0;
  for (const auto& [name, t] : want.state()) {
    const ElementRange r = ranges[static_cast<std::size_t>(ck::slot_index(name))];
    if (r.end == r.begin) {
      CHECK(slot(got, name).empty());
      continue;
    }
    ++expected;
    const auto whole = t.to_vector<float>();
    CHECK(slot(got, name) == std::vector<float>(whole.begin() + r.begin, whole.begin() + r.end));
  }
  CHECK(got.state().size() == expected);
}

/// A model and Adam of another initialisation (everything must come from the checkpoint),
/// with one device's checkpoints in `dir`.
struct Resumer {
  strata::OneDeviceStrategy one;
  strata::nn::Sequential model = mlp(2);
  strata::optim::Adam opt{model.parameters(), 0.01};
  strata::TrainingCheckpoints<strata::OneDeviceStrategy, strata::nn::Sequential, strata::optim::Adam> checkpoints;
  explicit Resumer(const std::filesystem::path& dir) : checkpoints(one, model, opt, dir) {}
};

/// A model trained with Adam in a directory of its own; save() writes its state as three ranks would.
struct Trained {
  TempDir dir;
  strata::nn::Sequential model = mlp(1);
  strata::optim::Adam opt{model.parameters(), 0.01};
  Trained() { train(model, opt); }
  void save(std::int64_t step, int replicas = 1) { save_sharded(dir.path, step, model.parameters(), opt, 3, replicas); }
};

}  // namespace state_shards
namespace ss = state_shards;

TEST_CASE("Checkpoint.StateShardsRestoreWholeAndByRange") {
  ss::Trained t;
  t.save(3);
  const auto& tmp = t.dir;
  auto& saved = t.model;
  auto& saved_opt = t.opt;

  // The manifest holds neither the parameters nor the optimizer's slots: the shards do.
  const ck::Reader manifest(ck::CheckpointManager(tmp.path).path_for(3));
  CHECK(ck::is_sharded_state(manifest));
  CHECK(manifest.find("param.0") == nullptr);
  CHECK(manifest.find("optimizer.m.0") == nullptr);
  // Without the shards' source, the manifest is refused by name.
  {
    auto m = ss::mlp(2);
    strata::optim::Adam o(m.parameters(), 0.01);
    CHECK_THROWS_WITH_AS(ck::restore_training_state(manifest, m.parameters(), o, 1), doctest::Contains("sharded training state"),
                         strata::invalid_argument);
  }

  SUBCASE("whole, into one device") {
    ss::Resumer r(tmp.path);
    const auto at = r.checkpoints.restore();
    REQUIRE(at.has_value());
    CHECK(at->step == 3);
    CHECK(ss::values(r.model.parameters()) == ss::values(saved.parameters()));
    CHECK(r.opt.steps() == saved_opt.steps());
    ss::check_state_ranges(r.opt, saved_opt, ss::ranges_of(r.model.parameters(), 0, 1));
  }
  SUBCASE("by range, into two ranks' shards") {
    for (int k = 0; k < 2; ++k) {
      auto m = ss::mlp(2);
      const auto ranges = ss::ranges_of(m.parameters(), k, 2);
      auto o = ss::sharded_adam(m.parameters(), ranges);
      const ck::StateSource src(manifest, tmp.path, 3);
      CHECK(src.ranks() == 3);
      (void)ck::restore_training_state(manifest, m.parameters(), o, 1, {}, {}, &src, ranges);
      CHECK(ss::values(m.parameters()) == ss::values(saved.parameters()));
      ss::check_state_ranges(o, saved_opt, ranges);
    }
  }
  SUBCASE("an ordinary checkpoint, by range") {
    const auto path = tmp.path / "whole.strata";
    ck::write_checkpoint(path, ck::capture_training_state(saved.parameters(), saved_opt, {3, 0, 3}, 1));
    auto m = ss::mlp(2);
    const auto ranges = ss::ranges_of(m.parameters(), 1, 4);
    auto o = ss::sharded_adam(m.parameters(), ranges);
    (void)ck::restore_training_state(ck::Reader(path), m.parameters(), o, 1, {}, {}, nullptr, ranges);
    CHECK(ss::values(m.parameters()) == ss::values(saved.parameters()));
    ss::check_state_ranges(o, saved_opt, ranges);
  }
}

TEST_CASE("Checkpoint.StateShardsDamagedOrMissingAreNamed") {
  ss::Trained t;
  t.save(3);
  const auto params_at_3 = ss::values(t.model.parameters());
  ss::train(t.model, t.opt);
  t.save(6);
  const auto& tmp = t.dir;

  SUBCASE("a damaged shard: its checkpoint is skipped for the one before") {
    const auto shard = ck::state_shard_path(tmp.path, 1, 3, 6);
    ::support::damage_last_tensor(shard);
    ss::Resumer r(tmp.path);
    const auto at = r.checkpoints.restore();
    REQUIRE(at.has_value());
    CHECK(at->step == 3);
    CHECK(ss::values(r.model.parameters()) == params_at_3);
    // Both damaged: none reads, and the error names the shard.
    ::support::damage_last_tensor(ck::state_shard_path(tmp.path, 2, 3, 3));
    ss::Resumer again(tmp.path);
    CHECK_THROWS_WITH_AS(again.checkpoints.restore(), doctest::Contains("state-00002-of-00003-000000000003.strata"),
                         strata::data_error);
  }
  SUBCASE("a missing shard is named") {
    std::filesystem::remove(ck::state_shard_path(tmp.path, 0, 3, 6));
    std::filesystem::remove(ck::state_shard_path(tmp.path, 0, 3, 3));
    ss::Resumer r(tmp.path);
    CHECK_THROWS_WITH_AS(r.checkpoints.restore(), doctest::Contains("state-00000-of-00003-000000000006.strata"),
                         strata::data_error);
  }
}

TEST_CASE("Checkpoint.StateShardsReplicaCountAndPruning") {
  ss::Trained t;
  t.save(2, 3);
  t.save(3, 3);
  const auto& tmp = t.dir;
  auto& saved = t.model;
  ss::Resumer r(tmp.path);
  // Written by 3 replicas in sync: refused on one unless the loop keeps its global batch.
  CHECK_THROWS_WITH_AS(r.checkpoints.restore(), doctest::Contains("written with 3 replicas in sync, this run has 1"),
                       strata::invalid_argument);
  const auto at = r.checkpoints.restore(strata::RestoreOptions{.any_replica_count = true});
  REQUIRE(at.has_value());
  CHECK(ss::values(r.model.parameters()) == ss::values(saved.parameters()));

  // The shards of steps no checkpoint keeps go; the others and unrelated files stay.
  std::filesystem::create_directories(tmp.path);
  { std::ofstream(tmp.path / "notes.txt") << "kept"; }
  ck::prune_state_shards(tmp.path, {3});
  for (int k = 0; k < 3; ++k) {
    CHECK_FALSE(std::filesystem::exists(ck::state_shard_path(tmp.path, k, 3, 2)));
    CHECK(std::filesystem::exists(ck::state_shard_path(tmp.path, k, 3, 3)));
  }
  CHECK(std::filesystem::exists(tmp.path / "notes.txt"));
}

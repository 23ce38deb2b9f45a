// A ShardedStrategy checkpoint saved on N ranks restores on any number of ranks and under
// other strategies: each rank of the saving job writes its shard of the training state and,
// beside the checkpoint, a plain dump of what it held (its ranges, their optimizer state; the
// chief the whole parameters). A restoring job compares what it restored with those dumps bit
// for bit, trains on to the end of the epoch, and compares its parameters with the ones the
// saving job reached without stopping (within 1e-5 relative: the sums run over another number
// of replicas). The MLP with Dropout, Adam, clipping by the global norm and a cosine schedule,
// global batch 25 (uneven over 2, 3 and 4), 20 steps, saved after step 10.
//   sharded_checkpoints save DIR mpi|gloo [stage3]           under mpirun / strata-run: ShardedStrategy (stage 2, or 3)
//   sharded_checkpoints load DIR mpi|gloo [stage1|stage3]    ShardedStrategy on this job's ranks
//   sharded_checkpoints load_multi_worker DIR mpi|gloo MultiWorkerMirroredStrategy
//   sharded_checkpoints load_one DIR                  OneDeviceStrategy, one process
// Exit status 0: every check held on this rank.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "strategies/equivalence.hpp"

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

namespace {

namespace fs = std::filesystem;
constexpr std::int64_t kSaveAt = 10;
int failures = 0;

std::string figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

template <class S>
int rank_of(const S& strategy) {
  if constexpr (requires { strategy.rank(); })
    return strategy.rank();
  else
    return 0;
}

void report(bool ok, int rank, int n, const std::string& what, const std::string& detail) {
  failures += ok ? 0 : 1;
  std::printf("%s rank %d of %d: %s: %s\n", ok ? "ok  " : "FAIL", rank, n, what.c_str(), detail.c_str());
}

// ---- the plain dumps: a vector's length, then its floats; a name's length, then its bytes --
void put_floats(std::ofstream& f, const strata::Tensor& t) {
  const auto v = t.contiguous().to_vector<float>();
  const auto n = static_cast<std::int64_t>(v.size());
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}
std::vector<float> get_floats(std::ifstream& f) {
  std::int64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), sizeof n);
  std::vector<float> v(static_cast<std::size_t>(n));
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}
void put_i64(std::ofstream& f, std::int64_t v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); }
std::int64_t get_i64(std::ifstream& f) {
  std::int64_t v = 0;
  f.read(reinterpret_cast<char*>(&v), sizeof v);
  return v;
}

/// What the saving job held after step kSaveAt, read back from its dumps: the whole
/// parameters, and each optimizer slot ("m.3") whole, assembled from the ranks' ranges.
struct Saved {
  std::vector<std::vector<float>> params;
  std::map<std::string, std::vector<float>> slots;
  std::vector<std::vector<float>> final_params;  // where the saving job ended, uninterrupted
};

Saved read_dumps(const fs::path& dir) {
  Saved s;
  std::ifstream pf(dir / "dump-params.bin", std::ios::binary);
  for (std::int64_t i = 0, n = get_i64(pf); i < n; ++i) s.params.push_back(get_floats(pf));
  std::ifstream ff(dir / "dump-final.bin", std::ios::binary);
  for (std::int64_t i = 0, n = get_i64(ff); i < n; ++i) s.final_params.push_back(get_floats(ff));
  for (int k = 0; fs::exists(dir / ("dump-rank-" + std::to_string(k) + ".bin")); ++k) {
    std::ifstream f(dir / ("dump-rank-" + std::to_string(k) + ".bin"), std::ios::binary);
    const std::int64_t slots = get_i64(f);
    for (std::int64_t j = 0; j < slots; ++j) {
      std::string name(static_cast<std::size_t>(get_i64(f)), '\0');
      f.read(name.data(), static_cast<std::streamsize>(name.size()));
      const std::int64_t i = get_i64(f), begin = get_i64(f);
      const std::vector<float> v = get_floats(f);
      auto& whole = s.slots[name];
      whole.resize(s.params.at(static_cast<std::size_t>(i)).size());
      std::copy(v.begin(), v.end(), whole.begin() + begin);
    }
  }
  return s;
}

/// Each rank's optimizer slots with the first element of the range they cover.
template <class S>
void dump_state(S& strategy, const fs::path& dir, const std::vector<strata::Tensor>& params,
                const strata::optim::Optimizer& opt) {
  const auto ranges = strategy.state_ranges(params);
  std::ofstream f(dir / ("dump-rank-" + std::to_string(strategy.rank()) + ".bin"), std::ios::binary);
  const auto state = opt.state();
  put_i64(f, static_cast<std::int64_t>(state.size()));
  for (const auto& [name, t] : state) {
    const auto i = static_cast<std::size_t>(strata::checkpoint::slot_index(name));
    put_i64(f, static_cast<std::int64_t>(name.size()));
    f.write(name.data(), static_cast<std::streamsize>(name.size()));
    put_i64(f, static_cast<std::int64_t>(i));
    put_i64(f, ranges[i].begin);
    put_floats(f, t);
  }
  if (strategy.is_chief()) {
    std::ofstream pf(dir / "dump-params.bin", std::ios::binary);
    put_i64(pf, static_cast<std::int64_t>(params.size()));
    for (const auto& p : params) put_floats(pf, p);
  }
}

/// The elements of each parameter this process's optimizer state covers.
template <class S>
std::vector<strata::optim::ElementRange> ranges_of(S& strategy, const std::vector<strata::Tensor>& params) {
  if constexpr (strata::detail::ShardsTrainingState<S>) return strategy.state_ranges(params);
  std::vector<strata::optim::ElementRange> whole;
  for (const auto& p : params) whole.push_back({0, p.numel()});
  return whole;
}

/// The restored parameters and optimizer state against the saving job's, bit for bit.
template <class S>
void check_restored(S& strategy, const Saved& saved, const std::vector<strata::Tensor>& params,
                    const strata::optim::Optimizer& opt, const std::string& who) {
  const int rank = rank_of(strategy), n = strategy.num_replicas_in_sync();
  bool params_equal = params.size() == saved.params.size();
  for (std::size_t i = 0; params_equal && i < params.size(); ++i)
    params_equal = params[i].to_vector<float>() == saved.params[i];
  report(params_equal, rank, n, who + ": parameters restored", params_equal ? "bitwise equal to the saved ones" : "differ");
  const auto ranges = ranges_of(strategy, params);
  std::size_t expected = 0, equal = 0;
  for (const auto& [name, whole] : saved.slots) {
    const auto i = static_cast<std::size_t>(strata::checkpoint::slot_index(name));
    if (ranges[i].end > ranges[i].begin) ++expected;
  }
  const auto state = opt.state();
  for (const auto& [name, t] : state) {
    const auto it = saved.slots.find(name);
    if (it == saved.slots.end()) continue;
    const auto i = static_cast<std::size_t>(strata::checkpoint::slot_index(name));
    const std::vector<float> want(it->second.begin() + ranges[i].begin, it->second.begin() + ranges[i].end);
    if (t.template to_vector<float>() == want) ++equal;
  }
  report(equal == expected && state.size() == expected, rank, n, who + ": optimizer state restored",
         std::to_string(equal) + " of " + std::to_string(expected) + " slots over this process's ranges bitwise equal (" +
             std::to_string(state.size()) + " held)");
}

/// The run: saves after step kSaveAt (`save`) or resumes from there, and trains the epoch out.
template <class S>
std::vector<std::vector<float>> run(S& strategy, const fs::path& dir, bool save, const std::string& who) {
  equivalence::Setup s;
  s.examples = 500;  // 20 steps of 25
  s.global_batch = 25;
  strata::manual_seed(7);
  auto net = strategy.scope([] { return equivalence::model(false, /*dropout=*/true); });
  auto opt = strategy.scope([&] { return strata::optim::Adam(net.parameters(), 0.01); });
  opt.set_schedule(strata::optim::Schedule::cosine(0.3, 20, 4, 0.01));
  opt.clip_by_global_norm(0.5);
  strata::TrainingCheckpoints checkpoints(strategy, net, opt, dir / "checkpoints");
  strata::checkpoint::TrainingPosition pos;
  if (!save) {
    const auto at = checkpoints.restore(strata::RestoreOptions{.any_replica_count = true});
    report(at.has_value() && at->step == kSaveAt, rank_of(strategy), strategy.num_replicas_in_sync(), who + ": resumed",
           at ? "from step " + std::to_string(at->step) : "no checkpoint");
    if (!at) return {};
    pos = *at;
    const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
    check_restored(strategy, read_dumps(dir), net.parameters(), opt, who);
  }
  auto pipeline = strata::data::Pipeline(equivalence::dataset(s)).shuffle(3).batch(s.global_batch);
  const std::int64_t per_epoch = pipeline.num_batches();
  pipeline.set_position(pos.epoch, pos.batch);
  for (auto& batch : strategy.distribute(pipeline)) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      opt.apply_gradients(ctx, strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size), net.parameters()));
    }, batch);
    pos = pos.after(batch, per_epoch);
    if (save && pos.step == kSaveAt) {
      checkpoints.save(pos);
      const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
      if constexpr (strata::detail::ShardsTrainingState<S>) dump_state(strategy, dir, net.parameters(), opt);
    }
  }
  const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
  std::vector<std::vector<float>> out;
  for (const auto& p : net.parameters()) out.push_back(p.template to_vector<float>());
  return out;
}

template <class S>
int save(S& strategy, const fs::path& dir) {
  const auto final_params = run(strategy, dir, true, "save");
  if (strategy.is_chief()) {
    std::ofstream f(dir / "dump-final.bin", std::ios::binary);
    put_i64(f, static_cast<std::int64_t>(final_params.size()));
    for (const auto& p : final_params) put_floats(f, strata::from_vector<float>({static_cast<std::int64_t>(p.size())}, p));
  }
  // The checkpoint is a manifest beside one shard per rank, and no rank wrote the whole state.
  const int n = strategy.num_replicas_in_sync();
  int shard_files = 0;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
    shard_files += e.path().filename().string().rfind("state-", 0) == 0 ? 1 : 0;
  const strata::checkpoint::Reader manifest(dir / "checkpoints" / "ckpt-000000000010.strata");
  const bool no_whole = manifest.find("param.0") == nullptr && manifest.find("optimizer.m.0") == nullptr;
  report(shard_files == n && no_whole, strategy.rank(), n, "save: a manifest and one shard per rank",
         std::to_string(shard_files) + " shard files; the manifest holds " + (no_whole ? "no" : "whole") +
             " parameters or optimizer slots");
  return failures;
}

template <class S>
int load(S& strategy, const fs::path& dir, const std::string& who) {
  const auto got = run(strategy, dir, false, who);
  const double diff = equivalence::max_relative_difference(got, read_dumps(dir).final_params);
  report(diff < 1e-5, rank_of(strategy), strategy.num_replicas_in_sync(), who + ": trained on after the reshard",
         "parameters differ from the uninterrupted run's by " + figure(diff) + " (relative)");
  return failures;
}

/// Stage 3 with the MLP's first and last layers as wrap units (the size rule at 4,096 bytes).
strata::ShardOptions small_units() {
  strata::ShardOptions o;
  o.unit_bytes = 4096;
  return o;
}

template <class C>
int main_for(const std::string& mode, const fs::path& dir, bool stage1, bool stage3) {
  using Stage3 = strata::ShardedStrategy<C, strata::ShardStage::parameters>;
  if (mode == "save" && stage3) {
    Stage3 s(strata::MultiWorkerOptions{}, small_units());
    return save(s, dir);
  }
  if (mode == "save") {
    strata::ShardedStrategy<C> s;
    return save(s, dir);
  }
  if (mode == "load" && stage3) {
    Stage3 s(strata::MultiWorkerOptions{}, small_units());
    return load(s, dir, "sharded stage 3 on " + std::to_string(s.num_replicas_in_sync()));
  }
  if (mode == "load" && stage1) {
    strata::ShardedStrategy<C, strata::ShardStage::optimizer_state> s;
    return load(s, dir, "sharded stage 1 on " + std::to_string(s.num_replicas_in_sync()));
  }
  if (mode == "load") {
    strata::ShardedStrategy<C> s;
    return load(s, dir, "sharded stage 2 on " + std::to_string(s.num_replicas_in_sync()));
  }
  if (mode == "load_multi_worker") {
    strata::MultiWorkerMirroredStrategy<C> s;
    return load(s, dir, "multi_worker_mirrored on " + std::to_string(s.num_replicas_in_sync()));
  }
  std::printf("unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: sharded_checkpoints save|load|load_multi_worker DIR mpi|gloo [stage1|stage3] | load_one DIR\n");
    return 2;
  }
  const std::string mode = argv[1], which = argc > 3 ? argv[3] : "";
  const fs::path dir = argv[2];
  const bool stage1 = argc > 4 && std::string(argv[4]) == "stage1";
  const bool stage3 = argc > 4 && std::string(argv[4]) == "stage3";
  try {
    if (mode == "load_one") {
      strata::OneDeviceStrategy one;
      return load(one, dir, "one device") == 0 ? 0 : 1;
    }
#if STRATA_HAS_MPI
    if (which == "mpi") return main_for<strata::collective::Mpi>(mode, dir, stage1, stage3) == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return main_for<strata::collective::Gloo>(mode, dir, stage1, stage3) == 0 ? 0 : 1;
#endif
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("no collective '%s' in this build\n", which.c_str());
  return 2;
}

// Resume with nothing lost (RELIABILITY B1, in one process): a run stopped at step 10,
// written as a checkpoint and restored into a freshly built model, optimizer and pipeline
// (initialised differently on purpose), ends bitwise where the uninterrupted run ends — the
// losses of every step and the final parameters — across an epoch boundary, for SGD with
// momentum and for Adam, with a Dropout layer whose own generator must continue its mask
// sequence. A checkpoint of another model or replica count fails before anything changes (C8).
#include <array>
#include <fstream>
#include <iterator>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/training_state.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/detail/process_replica.hpp>  // broadcast_bytes
#include <strata/strategy/detail/shared_checkpoint.hpp>

#include "doctest.hpp"
#include "support/damage.hpp"

namespace ck = strata::checkpoint;
using strata::Tensor;

namespace {

// With `words`, the inputs are 12 row numbers of a 200-row table per example (a batch of 16
// looks up some 120 of them).
strata::data::TensorDataset dataset(bool words = false) {
  strata::Generator g(3);
  std::vector<std::int64_t> labels(100), rows(words ? 1200 : 0);
  for (auto& l : labels) l = static_cast<std::int64_t>(g.below(4));
  for (auto& r : rows) r = static_cast<std::int64_t>(g.below(200));
  const Tensor x = words ? strata::from_vector<std::int64_t>({100, 12}, rows) : strata::uniform({100, 12}, -1, 1, g);
  return {x, strata::from_vector<std::int64_t>({100}, labels)};
}

struct Run {
  strata::nn::Sequential model;
  std::unique_ptr<strata::optim::Optimizer> opt;
  strata::data::Pipeline pipeline;
  std::vector<double> losses;
};

// `table`: a 200 x 3 table with row-sparse gradients first (lazy updates), its 12 rows per
// example flattened into the MLP.
Run make_run(std::uint64_t init_seed, bool adam, int hidden = 16, bool dropout = true, bool table = false) {
  using namespace strata::nn;
  strata::manual_seed(init_seed);
  Run r{table     ? Sequential(Embedding(200, 3, strata::TableGradient::row_sparse), Flatten(), Linear(36, hidden), ReLU(),
                               Dropout(0.25), Linear(hidden, 4))
        : dropout ? Sequential(Linear(12, hidden), ReLU(), Dropout(0.25), Linear(hidden, 4))
                  : Sequential(Linear(12, hidden), ReLU(), Linear(hidden, 4)),
        nullptr,
        strata::data::Pipeline(dataset(table)).shuffle(11).batch(16), {}};
  if (adam)
    r.opt = std::make_unique<strata::optim::Adam>(r.model.parameters(), 0.01);
  else
    r.opt = std::make_unique<strata::optim::Sgd>(r.model.parameters(), 0.1, strata::optim::SgdOptions{.momentum = 0.9});
  return r;
}

// Trains `r` from `pos` until `total` steps; stops early after step `stop` (-1: never) and
// returns the position to resume from.
ck::TrainingPosition train(Run& r, ck::TrainingPosition pos, std::int64_t total, std::int64_t stop = -1) {
  r.pipeline.set_position(pos.epoch, pos.batch);
  while (pos.step < total) {
    std::int64_t batch = pos.batch;
    for (const auto& b : r.pipeline) {
      // A random draw per step from the default generator, as data augmentation would: the
      // restored generator must continue the same sequence.
      const double jitter = 1.0 + 1e-3 * strata::default_generator().uniform();
      Tensor loss = strata::nn::cross_entropy(r.model(b.x), b.y) * jitter;
      r.losses.push_back(loss.item());
      r.opt->apply_gradients(strata::grad(loss, r.model.parameters()));
      ++pos.step;
      ++batch;
      if (pos.step == total || pos.step == stop) return {pos.step, pos.epoch + (batch == r.pipeline.num_batches()), batch == r.pipeline.num_batches() ? 0 : batch};
    }
    ++pos.epoch;
    pos.batch = 0;
  }
  return pos;
}

std::vector<std::vector<float>> values(const Run& r) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : r.model.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("Checkpoint.ResumeIsBitwise") {
  // Also with a row-sparse table updated lazily: its rows' state (momentum, moments) that
  // the steps before the checkpoint left, and the steps' count behind Adam's correction.
  const auto dir = std::filesystem::temp_directory_path() / ("strata_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (bool table : {false, true})
    for (bool adam : {false, true}) {
      CAPTURE(table);
      CAPTURE(adam);
      Run straight = make_run(1, adam, 16, true, table);
      strata::manual_seed(42);
      train(straight, {}, 24);

      Run first = make_run(1, adam, 16, true, table);
      strata::manual_seed(42);
      const ck::TrainingPosition at = train(first, {}, 24, 10);
      CHECK(at.step == 10);
      CHECK(at.epoch == 1);  // 7 batches per epoch: step 10 is inside the second
      CHECK(at.batch == 3);
      ck::write_checkpoint(dir / "c.strata", ck::capture_training_state(first.model.parameters(), *first.opt, at, 1,
                                                                        first.model.generators()));

      Run resumed = make_run(999, adam, 16, true, table);  // other initial values, fresh optimizer and pipeline
      strata::manual_seed(7);             // and another generator state
      const ck::TrainingPosition pos = ck::restore_training_state(ck::Reader(dir / "c.strata"), resumed.model.parameters(),
                                                                  *resumed.opt, 1, resumed.model.generators());
      CHECK(pos.step == at.step);
      CHECK(resumed.opt->steps() == 10);
      resumed.losses = first.losses;
      train(resumed, pos, 24);
      REQUIRE(resumed.losses.size() == straight.losses.size());
      CHECK(resumed.losses == straight.losses);  // bitwise, every step
      CHECK(values(resumed) == values(straight));
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("Checkpoint.RestoreRejectsAnotherModelOrWorld") {  // RELIABILITY C8
  const auto dir = std::filesystem::temp_directory_path() / ("strata_c8_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Run r = make_run(1, false);
  strata::manual_seed(42);
  const auto at = train(r, {}, 24, 5);
  ck::write_checkpoint(dir / "c.strata", ck::capture_training_state(r.model.parameters(), *r.opt, at, 4,
                                                                      r.model.generators()));
  auto message = [&](Run& target, int replicas) {
    const auto before = values(target);
    try {
      ck::restore_training_state(ck::Reader(dir / "c.strata"), target.model.parameters(), *target.opt, replicas,
                                 target.model.generators());
    } catch (const strata::invalid_argument& e) {
      CHECK(values(target) == before);  // nothing changed
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Run same = make_run(2, false);
  CHECK(message(same, 2).find("written with 4 replicas in sync, this run has 2") != std::string::npos);
  Run wider = make_run(2, false, 32);
  CHECK(message(wider, 4).find("shape mismatch for 'param.0': [16, 12] float32 in '") != std::string::npos);
  Run no_dropout = make_run(2, false, 16, false);
  CHECK(message(no_dropout, 4).find("holds 1 module generators (Dropout layers), the model has 0") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Checkpoint.TrainingPositionAfterEachBatch") {
  // 10 examples in batches of 4: 3 batches an epoch. The position after each step names the
  // batch a resumed pipeline yields next.
  const strata::data::TensorDataset ds(strata::zeros({10, 2}), strata::zeros({10}, strata::DType::i64));
  auto pipeline = strata::data::Pipeline(ds).shuffle(1).batch(4);
  strata::checkpoint::TrainingPosition at;
  std::vector<std::array<std::int64_t, 3>> seen;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& b : pipeline) {
      at = at.after(b, pipeline.num_batches());
      seen.push_back({at.step, at.epoch, at.batch});
      if (at.step == 6) continue;  // the run's end: nothing to resume
      auto resumed = pipeline;
      resumed.set_position(at.epoch, at.batch);
      const auto next = resumed.begin();
      CHECK(next->epoch == at.epoch);
      CHECK(next->index == at.batch);
    }
  const std::vector<std::array<std::int64_t, 3>> want = {{1, 0, 1}, {2, 0, 2}, {3, 1, 0}, {4, 1, 1}, {5, 1, 2}, {6, 2, 0}};
  CHECK(seen == want);
}

TEST_CASE("Checkpoint.BuffersResumeAndMismatchesAreNamed") {
  // A model with batch norm: its running statistics ride in the checkpoint beside the
  // parameters, so a resumed model evaluates as the saved one; a model with other buffers is
  // refused before anything changes.
  const auto make = [] {
    return strata::nn::Sequential(strata::nn::Linear(12, 6), strata::nn::BatchNorm1d(6), strata::nn::ReLU(),
                                  strata::nn::Linear(6, 4));
  };
  strata::manual_seed(1);
  auto trained = make();
  strata::optim::Sgd opt(trained.parameters(), 0.1);
  const auto data = dataset();
  for (const auto& b : strata::data::Pipeline(data).batch(25))
    opt.apply_gradients(strata::grad(strata::nn::cross_entropy(trained(b.x), b.y), trained.parameters()));
  const auto path = std::filesystem::temp_directory_path() / ("strata_buffers_" + std::to_string(::getpid()) + ".strata");
  ck::write_checkpoint(path, ck::capture_training_state(trained.parameters(), opt, {4, 1, 0}, 1, {}, trained.buffers()));
  strata::manual_seed(2);
  auto resumed = make();
  strata::optim::Sgd opt2(resumed.parameters(), 0.1);
  (void)ck::restore_training_state(ck::Reader(path), resumed.parameters(), opt2, 1, {}, resumed.buffers());
  trained.eval();
  resumed.eval();
  CHECK(resumed(data.x).to_vector<float>() == trained(data.x).to_vector<float>());
  CHECK(resumed.buffers()[2].to_vector<float>()[0] == 4.0f);  // num_batches_tracked
  auto plain = strata::nn::Sequential(strata::nn::Linear(12, 6), strata::nn::LayerNorm(6), strata::nn::ReLU(),
                                      strata::nn::Linear(6, 4));  // the same parameters, no buffers
  strata::optim::Sgd opt3(plain.parameters(), 0.1);
  CHECK_THROWS_WITH_AS(ck::restore_training_state(ck::Reader(path), plain.parameters(), opt3, 1, {}, plain.buffers()),
                       doctest::Contains("holds 3 buffers (BatchNorm's running statistics), the model has 0"),
                       strata::invalid_argument);
  std::filesystem::remove(path);
}

// Across processes, each process reads the chief's checkpoint through the chief, a tensor at a
// time (detail::share_checkpoint): over three real InProcess ranks, every rank reads every
// tensor (a large one in several broadcast pieces, small ones sent with the index) bitwise as
// written, and with no checkpoint every rank gets none.
namespace {
struct ChiefShares {
  strata::collective::InProcess& comm;
  bool is_chief() const { return comm.rank() == 0; }
  void share_from_chief(std::vector<unsigned char>& bytes) { strata::detail::broadcast_bytes(comm, bytes, 0); }
  void broadcast_from_chief(void* data, std::size_t n) {
    ++pieces;
    comm.broadcast_raw(data, n, strata::DType::u8, 0);
  }
  int pieces = 0;
};
}  // namespace

TEST_CASE("Checkpoint.SharedFromTheChiefTensorByTensor") {
  static_assert(strata::detail::SharesChiefTensors<ChiefShares>);
  const auto dir = std::filesystem::temp_directory_path() / ("strata_shared_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  strata::Generator g(9);
  const std::int64_t large = static_cast<std::int64_t>(strata::detail::kSharedPiece / sizeof(float)) + 1000;
  const ck::NamedTensors tensors = {{"large", strata::uniform({large}, -1, 1, g)},
                                    {"small", strata::uniform({5, 3}, -1, 1, g)},
                                    {"steps", strata::full({}, 42, strata::DType::i64)}};
  ck::write_checkpoint(dir / "c.strata", tensors);
  std::vector<std::vector<float>> large_seen(3), small_seen(3);
  std::vector<std::int64_t> steps_seen(3, -1);
  std::vector<int> pieces(3);
  std::vector<char> none(3, 0);
  strata::collective::InProcess::launch(3, [&](strata::collective::InProcess& comm) {
    ChiefShares share{comm};
    const auto r = static_cast<std::size_t>(comm.rank());
    std::optional<ck::Reader> chief;
    if (share.is_chief()) chief.emplace(dir / "c.strata");
    std::optional<ck::Reader> mine = strata::detail::share_checkpoint(share, std::move(chief));
    REQUIRE(mine);
    steps_seen[r] = static_cast<std::int64_t>(mine->read("steps").item());
    Tensor into = Tensor::empty({large});
    mine->read_into("large", into);
    large_seen[r] = into.to_vector<float>();
    small_seen[r] = mine->read("small").to_vector<float>();
    pieces[r] = share.pieces;
    // No checkpoint on the chief: none anywhere.
    none[r] = !strata::detail::share_checkpoint(share, std::optional<ck::Reader>{}).has_value();
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(steps_seen[r] == 42);
    CHECK(large_seen[r] == tensors[0].second.to_vector<float>());
    CHECK(small_seen[r] == tensors[1].second.to_vector<float>());
    CHECK(pieces[r] == 2);  // the large tensor in two pieces; the small ones came with the index
    CHECK(none[r]);
  }
  std::filesystem::remove_all(dir);
}

namespace {
std::vector<char> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

/// A model and optimizer under `strategy`, and its checkpoints in `dir` (three kept).
template <strata::Strategy S>
struct Checkpointed {
  Checkpointed(S& s, const std::filesystem::path& dir)
      : model(s.scope([] { return strata::nn::Sequential(strata::nn::Linear(4, 3)); })),
        opt(s.scope([&] { return strata::optim::Sgd(model.parameters(), 0.1); })),
        checkpoints(s, model, opt, dir, 3) {}
  decltype(std::declval<S&>().scope([] { return strata::nn::Sequential(); })) model;
  decltype(std::declval<S&>().scope([] { return strata::optim::Sgd(std::vector<Tensor>{}, 0.1); })) opt;
  strata::TrainingCheckpoints<S, decltype(model), decltype(opt)> checkpoints;
};
}  // namespace

// RELIABILITY C2: damaged checkpoints are never trained over nor pruned. The newest damaged:
// the run resumes from the one before, and the damaged one is set aside, where later saves
// neither prune nor overwrite it. Every one damaged: an error naming each file, nothing
// changed, unless the run asks to start afresh (they are set aside, and kept).
TEST_CASE_TEMPLATE("Checkpoint.DamagedCheckpointsAreNeverTrainedOverNorPruned", S, strata::OneDeviceStrategy,
                   strata::MirroredStrategy<>) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_damaged_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  S strategy;
  {
    Checkpointed<S> run(strategy, dir);
    for (std::int64_t step : {10, 20, 30}) run.checkpoints.save({step, 0, step});
  }
  const ck::CheckpointManager m(dir, 3);
  ::support::damage_last_tensor(m.path_for(30));
  const auto damaged_30 = file_bytes(m.path_for(30));
  {
    Checkpointed<S> run(strategy, dir);
    const auto pos = run.checkpoints.restore();
    REQUIRE(pos.has_value());
    CHECK(pos->step == 20);
    CHECK(m.steps() == std::vector<std::int64_t>{20, 10});
    CHECK(m.set_aside_steps() == std::vector<std::int64_t>{30});
    auto set_aside = m.path_for(30);
    set_aside += ".damaged";
    CHECK(file_bytes(set_aside) == damaged_30);
    for (std::int64_t step : {30, 40, 50, 60}) run.checkpoints.save({step, 0, step});  // step 30 again, and rotation
    CHECK(m.steps() == std::vector<std::int64_t>{60, 50, 40});
    CHECK(file_bytes(set_aside) == damaged_30);
  }
  for (std::int64_t step : m.steps()) ::support::damage_last_tensor(m.path_for(step));
  const auto before_40 = file_bytes(m.path_for(40));
  {
    Checkpointed<S> run(strategy, dir);
    const auto params_before = run.model.parameters()[0].template to_vector<float>();
    try {
      (void)run.checkpoints.restore();
      FAIL("restoring from a directory of damaged checkpoints did not throw");
    } catch (const strata::data_error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("[strata.checkpoint.unreadable]") != std::string::npos);
      CHECK(what.find("holds 3 checkpoint(s) and none can be read") != std::string::npos);
      for (std::int64_t step : {40, 50, 60})
        CHECK(what.find(m.path_for(step).string() + ": [strata.checkpoint.checksum]") != std::string::npos);
      CHECK(what.find("start_afresh") != std::string::npos);
    }
    CHECK(m.steps() == std::vector<std::int64_t>{60, 50, 40});  // nothing moved, nothing changed
    CHECK(file_bytes(m.path_for(40)) == before_40);
    CHECK(run.model.parameters()[0].template to_vector<float>() == params_before);
    CHECK_FALSE(run.checkpoints.restore(strata::UnreadableCheckpoints::start_afresh).has_value());
    CHECK(m.steps().empty());
    CHECK(m.set_aside_steps() == std::vector<std::int64_t>{60, 50, 40, 30});
    for (std::int64_t step : {10, 20, 30, 40}) run.checkpoints.save({step, 0, step});
    CHECK(m.steps() == std::vector<std::int64_t>{40, 30, 20});
    CHECK(m.set_aside_steps() == std::vector<std::int64_t>{60, 50, 40, 30});  // ckpt-...40.strata.damaged kept too
    auto again = m.path_for(40);
    again += ".damaged";
    CHECK(file_bytes(again) == before_40);
  }
  std::filesystem::remove_all(dir);
}

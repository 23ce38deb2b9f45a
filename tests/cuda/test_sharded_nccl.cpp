// ShardedStrategy<Nccl> on one GPU (a group of one rank, bootstrapped by InProcess): each
// stage trains the model, its shards and their optimizer state on the GPU as OneDeviceStrategy
// trains it on the CPU; stage 3 gives its wrap units' memory back between steps; a sharded
// checkpoint saved from the GPU restores there bitwise. Groups of several processes share
// the code paths of ShardedStrategy<Mpi> and <Gloo> (tests/strategies/sharded_equivalence.cpp).
#include "doctest.hpp"

#include <filesystem>
#include <vector>

#include <strata/collective/in_process.hpp>
#include <strata/collective/nccl.hpp>

#include "cuda_test_support.hpp"

using namespace strata;
using namespace cuda_test;
using collective::InProcess;
using collective::Nccl;

namespace {

nn::Sequential make_model() {
  Generator gen(5);
  nn::Sequential m;
  m.add(nn::Linear(20, 33, true, gen, DType::f64));  // (33: a count no block size divides)
  m.add(nn::ReLU());
  m.add(nn::Linear(33, 4, true, gen, DType::f64));
  return m;
}

data::Batch make_batch() {
  Generator gen(6);
  data::Batch b;
  b.x = normal({16, 20}, 0, 1, gen, DType::f64);
  b.y = Tensor::empty({16}, DType::i64);
  for (int i = 0; i < 16; ++i) b.y.data<std::int64_t>()[i] = i % 4;
  b.size = b.global_size = 16;
  return b;
}

// Six steps of Adam with global-norm clipping; the losses, and the parameters after (on the host).
template <class S, class Model, class Opt>
std::vector<double> train(S& strategy, Model& model, Opt& opt, const data::Batch& b, int steps = 6) {
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step)
    losses.push_back(strategy.reduce(ReduceOp::Sum, strategy.run([&](ReplicaContext& ctx, const data::Batch& on) {
      Tensor loss = softmax_cross_entropy(model(on.x), on.y, 1.0 / 16);
      opt.apply_gradients(ctx, grad(loss, model.parameters()));
      return loss.item();
    }, b)));
  return losses;
}

template <class S>
std::vector<std::vector<double>> parameters_of(S& strategy, nn::Sequential& model) {
  const GatheredParameters whole = gather_parameters(strategy, model.parameters());
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.to_vector<double>());
  return out;
}

auto make_adam(nn::Sequential& model) {
  optim::Adam adam(model.parameters(), 0.01);
  adam.clip_by_global_norm(0.5);
  return adam;
}

template <ShardStage Stage>
void follows_one_device() {
  const data::Batch b = make_batch();
  OneDeviceStrategy cpu;
  auto want_model = cpu.scope(make_model);
  auto want_opt = make_adam(want_model);
  const auto want = train(cpu, want_model, want_opt, b);
  const auto want_params = parameters_of(cpu, want_model);

  auto boot = InProcess::make_group(1);
  ShardOptions units;
  units.wrap_units = {"0", "2"};
  ShardedStrategy<Nccl, Stage> gpu(MultiWorkerOptions{}, units, boot[0], 0);
  auto model = gpu.scope(make_model);
  for (const Tensor& p : model.parameters()) CHECK(p.device() == kDev);
  auto opt = gpu.scope([&] { return make_adam(model); });
  const auto got = train(gpu, model, opt, b);
  for (std::size_t s = 0; s < want.size(); ++s) CHECK(got[s] == doctest::Approx(want[s]).epsilon(1e-9));
  if constexpr (Stage == ShardStage::parameters) {
    CHECK(gpu.wrap_units(model.parameters()) == std::vector<std::string>{"0", "2"});
    CHECK(gpu.unit_bytes_held(model.parameters()) == 0);  // between steps: the blocks alone
  }
  if constexpr (Stage != ShardStage::optimizer_state) CHECK(gpu.gradient_bytes_held(model.parameters()) == 0);
  const auto got_params = parameters_of(gpu, model);
  REQUIRE(got_params.size() == want_params.size());
  for (std::size_t k = 0; k < want_params.size(); ++k)
    for (std::size_t i = 0; i < want_params[k].size(); ++i)
      CHECK(got_params[k][i] == doctest::Approx(want_params[k][i]).epsilon(1e-9));

  // Saved from the GPU, restored there by a fresh strategy: the same parameters, bit for bit,
  // and the same next step.
  const auto dir = std::filesystem::temp_directory_path() / ("strata_sharded_nccl_" + std::to_string(int(Stage)));
  std::filesystem::remove_all(dir);
  {
    TrainingCheckpoints saved(gpu, model, opt, dir);
    saved.save({6, 0, 6});
  }
  const auto next = train(gpu, model, opt, b, 1);
  auto boot2 = InProcess::make_group(1);
  ShardedStrategy<Nccl, Stage> again(MultiWorkerOptions{}, units, boot2[0], 0);
  auto model2 = again.scope(make_model);
  auto opt2 = again.scope([&] { return make_adam(model2); });
  TrainingCheckpoints restored(again, model2, opt2, dir);
  const auto pos = restored.restore();
  REQUIRE(pos.has_value());
  CHECK(pos->step == 6);
  CHECK(parameters_of(again, model2) == got_params);
  CHECK(train(again, model2, opt2, b, 1) == next);
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("ShardedStrategy<Nccl> stage 1 trains on the GPU as OneDeviceStrategy on the CPU") {
  follows_one_device<ShardStage::optimizer_state>();
}
TEST_CASE("ShardedStrategy<Nccl> stage 2 trains on the GPU as OneDeviceStrategy on the CPU") {
  follows_one_device<ShardStage::gradients>();
}
TEST_CASE("ShardedStrategy<Nccl> stage 3 trains on the GPU as OneDeviceStrategy on the CPU") {
  follows_one_device<ShardStage::parameters>();
}

// ShardedStrategy over a device collective, on the CPU: a group of one rank whose buffers are
// on the stand-in device cuda:0 (support/host_device.hpp), the shape of ShardedStrategy<Nccl>
// on one GPU. The model, its flat buffers, its shards and their optimizer state live on the
// device, so every copy, view and update takes its device path; each stage ends where
// OneDeviceStrategy on the CPU ends (Adam, global-norm clipping, a cosine schedule, dropout,
// gradient accumulation), and a sharded checkpoint saved from the device restores there bit
// for bit. At one rank every collective is the identity: what this proves is the placement,
// not the communication, which sharded_equivalence proves over Mpi and Gloo.
#include "doctest.hpp"

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <strata/collective/in_process.hpp>

#include "strategies/equivalence.hpp"
#include "support/host_device.hpp"

namespace {

/// One rank, its buffers on cuda:0: InProcess's collectives (at one rank, copies of host
/// memory, which the stand-in device's is) and what a device collective adds, queued work
/// that a single rank completes at once.
class OneRankOnDevice : public strata::collective::InProcess {
 public:
  static constexpr const char* name = "one rank on cuda:0";
  OneRankOnDevice() : InProcess(std::move(InProcess::make_group(1).front())) {}
  int device() const noexcept { return 0; }
  void start_allreduce_raw(void*, std::size_t, strata::DType, strata::ReduceOp) {}
  void join_compute() {}
};

}  // namespace

template <>
inline constexpr bool strata::enable_collective<OneRankOnDevice> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<OneRankOnDevice> = true;
template <>
inline constexpr bool strata::collective::enable_device_collective<OneRankOnDevice> = true;
static_assert(strata::collective::DeviceCollective<OneRankOnDevice> &&
              !strata::collective::ThreadGroupCollective<OneRankOnDevice>);

namespace {

using namespace strata;

template <ShardStage Stage>
std::unique_ptr<ShardedStrategy<OneRankOnDevice, Stage>> make_sharded() {
  ShardOptions units;
  units.wrap_units = {"0", "2"};  // (stage 3; the others ignore it)
  return std::make_unique<ShardedStrategy<OneRankOnDevice, Stage>>(MultiWorkerOptions{.bucket_bytes = 2048}, units);
}

template <ShardStage Stage>
void follows_one_device() {
  for (int k : {1, 2}) {
    equivalence::Setup s;
    s.global_batch = 25;
    s.examples = 20 * 25 + 5;
    s.accumulation = k;
    s.adam = true;
    s.clip_norm = 0.5;
    s.schedule = true;
    s.dropout = true;
    std::vector<double> want_losses, got_losses;
    const auto want = equivalence::one_device_reference(s, &want_losses);
    auto strategy = make_sharded<Stage>();
    s.after_training = [&](nn::Module& m) {  // (inside gather_parameters)
      for (const Tensor& p : m.parameters()) CHECK(p.device() == Device::cuda(0));
      if constexpr (Stage != ShardStage::optimizer_state) CHECK(strategy->gradient_bytes_held(m.parameters()) == 0);
    };
    const auto got = equivalence::train_steps(*strategy, s, &got_losses);
    CAPTURE(k);
    CHECK(equivalence::max_relative_difference(got, want) < 1e-5);
    CHECK(equivalence::loss_difference(got_losses, want_losses) < 1e-5);
  }
}

// Everything a restore must reproduce, on the host: the parameters, then each optimizer slot.
template <class S>
std::vector<std::vector<float>> state_of(S& strategy, nn::Module& m, const optim::Optimizer& opt) {
  const GatheredParameters whole = gather_parameters(strategy, m.parameters());
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  for (const auto& slot : opt.state()) out.push_back(slot.second.to_vector<float>());
  return out;
}

template <ShardStage Stage>
void checkpoint_round_trip() {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_sharded_on_device_" + std::to_string(int(Stage)));
  std::filesystem::remove_all(dir);
  equivalence::Setup s;
  const auto data = equivalence::dataset(s);
  auto step = [&](auto& strategy, auto& net, auto& opt, std::int64_t at) {
    data::Batch b;
    b.x = data::slice_rows(data.x, at, at + 26);
    b.y = data::slice_rows(data.y, at, at + 26);
    b.size = b.global_size = 26;
    strategy.run([&](ReplicaContext& ctx, const data::Batch& on) {
      opt.apply_gradients(ctx, grad(equivalence::replica_loss(net, on.x, on.y, on.global_size), net.parameters()));
    }, b);
  };
  manual_seed(7);
  auto strategy = make_sharded<Stage>();
  auto net = strategy->scope([] { return equivalence::model(false); });
  auto opt = strategy->scope([&] { return optim::Adam(net.parameters(), 0.01); });
  for (std::int64_t at : {0, 26, 52}) step(*strategy, net, opt, at);
  TrainingCheckpoints(*strategy, net, opt, dir).save({3, 0, 3});
  const auto saved = state_of(*strategy, net, opt);
  step(*strategy, net, opt, 78);
  const auto next = state_of(*strategy, net, opt);

  manual_seed(8);  // (other initial values: the restore must replace them)
  auto again = make_sharded<Stage>();
  auto net2 = again->scope([] { return equivalence::model(false); });
  auto opt2 = again->scope([&] { return optim::Adam(net2.parameters(), 0.01); });
  const auto pos = TrainingCheckpoints(*again, net2, opt2, dir).restore();
  REQUIRE(pos.has_value());
  CHECK(pos->step == 3);
  for (const Tensor& p : net2.parameters()) CHECK(p.device() == Device::cuda(0));
  for (const auto& slot : opt2.state()) CHECK(slot.second.device() == Device::cuda(0));
  CHECK(state_of(*again, net2, opt2) == saved);
  step(*again, net2, opt2, 78);
  CHECK(state_of(*again, net2, opt2) == next);
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("Strategy.ShardedOnDevices.EquivalentToOneDevice") {
  REQUIRE(support::host_device::installed);
  follows_one_device<ShardStage::optimizer_state>();
  follows_one_device<ShardStage::gradients>();
  follows_one_device<ShardStage::parameters>();
}

TEST_CASE("Strategy.ShardedOnDevices.ModelOutlivesItsStrategy") {
  // A stage 3 model detached from its strategy runs and trains as a plain model once the
  // strategy is gone (elastic::Trainer returns one): no hook of the strategy is left to run.
  REQUIRE(support::host_device::installed);
  equivalence::Setup s;
  const auto data = equivalence::dataset(s);
  const Tensor x = data::slice_rows(data.x, 0, 8).to(Device::cuda(0)), y = data::slice_rows(data.y, 0, 8).to(Device::cuda(0));
  manual_seed(7);
  auto strategy = make_sharded<ShardStage::parameters>();
  auto net = strategy->scope([] { return equivalence::model(false); });
  strategy->detach(net.parameters());
  const auto before = net.parameters().front().to_vector<float>();
  strategy.reset();
  const auto grads = grad(equivalence::replica_loss(net, x, y, 8), net.parameters());
  for (std::size_t k = 0; k < net.parameters().size(); ++k) {
    CHECK(grads[k].device() == Device::cuda(0));
    for (float v : grads[k].to_vector<float>()) CHECK(std::isfinite(v));
  }
  CHECK(net.parameters().front().to_vector<float>() == before);
}

TEST_CASE("Strategy.ShardedOnDevices.CheckpointRestoresBitwise") {
  REQUIRE(support::host_device::installed);
  checkpoint_round_trip<ShardStage::optimizer_state>();
  checkpoint_round_trip<ShardStage::gradients>();
  checkpoint_round_trip<ShardStage::parameters>();
}

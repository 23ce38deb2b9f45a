// The user's own input under the strategies of one process: a dataset of several inputs and no
// labels (a two-input regression whose target is a third input), and a per-worker input
// function, each ending where OneDeviceStrategy ends after every step of an epoch. The
// multi-process strategies run the per-worker check in multi_worker_equivalence and
// parameter_server_equivalence.
#include "doctest.hpp"

#include <vector>

#include "strategies/equivalence.hpp"

using namespace strata;

namespace {

/// out = A x + B z: a model of two inputs.
class TwoInputs : public nn::Module {
 public:
  TwoInputs() {
    a_ = &register_module("a", std::make_unique<nn::Linear>(20, 5));
    b_ = &register_module("b", std::make_unique<nn::Linear>(3, 5));
  }
  Tensor operator()(const Tensor& x, const Tensor& z) { return add((*a_)(x), (*b_)(z)); }
  Tensor forward(const Tensor&) override {
    STRATA_CHECK(false, "TwoInputs takes two inputs: call model(x, z)");
    return {};
  }

 private:
  nn::Module *a_, *b_;
};

template <Strategy S>
std::vector<std::vector<float>> train_two_inputs(S& strategy, std::int64_t global_batch) {
  Generator g(11);
  const std::int64_t n = 230;
  const data::TensorDataset ds(data::Inputs(uniform({n, 20}, -1, 1, g), uniform({n, 3}, -1, 1, g), uniform({n, 5}, -1, 1, g)));
  manual_seed(2);
  auto net = strategy.scope([] { return TwoInputs(); });
  auto opt = strategy.scope([&] { return optim::Adam(net.parameters(), 0.01); });
  for (auto& batch : strategy.distribute(data::Pipeline(ds).shuffle(5).batch(global_batch)))
    strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      CHECK(!b.y.defined());
      Tensor loss = nn::mse_loss(net(b.x, b.input(1)), b.input(2), nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, net.parameters()));
    }, batch);
  std::vector<std::vector<float>> params;
  for (const Tensor& p : net.parameters()) params.push_back(p.to_vector<float>());
  return params;
}

}  // namespace

TEST_CASE("Strategy.SeveralInputsWithoutLabelsEquivalentToOneDevice") {
  for (std::int64_t global : {25, 26}) {
    OneDeviceStrategy one;
    const auto ref = train_two_inputs(one, global);
    for (int n : {2, 3}) {
      CAPTURE(global);
      CAPTURE(n);
      MirroredStrategy<> mirrored(n);
      CHECK(equivalence::max_relative_difference(train_two_inputs(mirrored, global), ref) < 1e-5);
      CentralStorageStrategy<> central(n);
      CHECK(equivalence::max_relative_difference(train_two_inputs(central, global), ref) < 1e-5);
    }
  }
}

TEST_CASE("Strategy.PerWorkerInputFunctionEquivalentToOneDevice") {
  equivalence::Setup plain;
  plain.shuffle = false;
  plain.global_batch = 24;
  equivalence::Setup own = plain;
  own.per_worker_input = true;
  OneDeviceStrategy one;
  const auto ref = equivalence::train_steps(one, plain);
  CHECK(equivalence::max_relative_difference(equivalence::train_steps(one, own), ref) < 1e-6);
  for (int n : {2, 3}) {
    CAPTURE(n);
    MirroredStrategy<> mirrored(n);
    CHECK(equivalence::max_relative_difference(equivalence::train_steps(mirrored, own), ref) < 1e-5);
    CentralStorageStrategy<> central(n);
    CHECK(equivalence::max_relative_difference(equivalence::train_steps(central, own), ref) < 1e-5);
    // One process is one worker: the function is told so, with the replicas in sync.
    InputContext seen;
    auto data = mirrored.distribute([&](const InputContext& ctx) {
      seen = ctx;
      return data::Pipeline(equivalence::dataset(plain)).batch(ctx.per_worker_batch_size(24));
    });
    CHECK(seen.num_input_pipelines == 1);
    CHECK(seen.input_pipeline_id == 0);
    CHECK(seen.num_replicas_in_sync == n);
    CHECK(data.options().batch_size == 24);
  }
  // A worker's balanced share of a global batch.
  const InputContext first{3, 0, 3}, last{3, 2, 3}, four{4, 0, 4};
  CHECK(first.per_worker_batch_size(26) == 9);
  CHECK(last.per_worker_batch_size(26) == 8);
  CHECK_THROWS_WITH_AS((void)four.per_worker_batch_size(3), doctest::Contains("at least one example per worker"),
                       invalid_argument);
}

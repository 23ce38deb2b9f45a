// The split optimizer update (detail::PartitionedUpdate): each replica updates its share of the
// variables and writes it into the other copies, and ends with the bits every replica gets by
// updating all of its copy, under MirroredStrategy and CentralStorageStrategy.
#include "doctest.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "strategies/equivalence.hpp"


using strata::Tensor;
using equivalence::one_device_reference;

namespace {

// Every replica's parameters and optimizer state after `steps` steps of `make_opt` under
// MirroredStrategy(n) with or without the split update (resuming from `resume` if given:
// every replica loads its parameters and state, as TrainingCheckpoints does, and the data goes
// on from batch `resume_steps`).
struct SplitRun {
  std::vector<std::vector<std::vector<float>>> params;  // [replica][parameter]
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> state;  // [replica]
  std::vector<std::vector<Tensor>> shared_state;  // [replica]: the state tensors themselves
  std::vector<std::vector<std::vector<float>>> grads;  // [replica][parameter], after the last step
};

// `steps` steps of the equivalence model under `strategy` (n replicas), optionally resumed from
// replica 0's values and state in `resume` after `resume_steps` steps.
template <class S, class MakeOpt>
SplitRun run_steps(S& strategy, int n, int steps, MakeOpt make_opt, const SplitRun* resume, std::int64_t resume_steps) {
  strata::manual_seed(5);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return make_opt(net.parameters()); });
  if (resume)
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      strata::NoGradGuard no_grad;
      for (std::size_t k = 0; k < net.replica(ur).parameters().size(); ++k) {
        Tensor p = net.replica(ur).parameters()[k];
        p.copy_(strata::from_vector<float>(p.shape(), resume->params[0][k]));
      }
      std::vector<std::pair<std::string, Tensor>> st;
      for (const auto& [name, v] : resume->state[0]) {
        const std::size_t i = std::stoul(name.substr(name.rfind('.') + 1));
        st.emplace_back(name, strata::from_vector<float>(net.replica(ur).parameters()[i].shape(), v));
      }
      opt.replica(ur).load_state(st, resume_steps);
    }
  equivalence::Setup s;
  auto pipeline = strata::data::Pipeline(equivalence::dataset(s)).batch(26).take(resume_steps + steps);
  pipeline.set_position(0, resume_steps);
  auto data = strategy.distribute(pipeline);
  for (auto& batch : data)
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
  SplitRun out;
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    auto& ps = out.params.emplace_back();
    for (const Tensor& p : net.replica(ur).parameters()) ps.push_back(p.to_vector<float>());
    auto& st = out.state.emplace_back();
    auto& tensors = out.shared_state.emplace_back();
    for (const auto& [name, t] : opt.replica(ur).state()) {
      st.emplace_back(name, t.template to_vector<float>());
      tensors.push_back(t);
    }
    auto& gs = out.grads.emplace_back();
    for (const Tensor& p : net.replica(ur).parameters()) gs.push_back(p.grad().to_vector<float>());
  }
  return out;
}

template <class MakeOpt>
SplitRun run_split(int n, strata::UpdateSplit mode, int steps, MakeOpt make_opt, const SplitRun* resume = nullptr,
                   std::int64_t resume_steps = 0, strata::SplitChoiceOptions choice = equivalence::kSwitchEveryProbe,
                   strata::GradientLayout layout = strata::GradientLayout::whole) {
  strata::MirroredStrategy strategy(
      n, {.bucket_bytes = 2048, .split_update = mode, .split_choice = choice, .gradients = layout});
  return run_steps(strategy, n, steps, make_opt, resume, resume_steps);
}

}  // namespace

// Each replica updates its share and writes it into the others' copies (PartitionedUpdate): every
// copy ends with the bits every replica gets by updating all of its copy, and every replica's
// optimizer state is whole (one set of tensors, shared), so a checkpoint of any replica holds
// all of it. After load_state on every replica (a resume) the state is shared again and the
// run goes on as an uninterrupted one does. Measured (UpdateSplit::measured), switching
// between the two ways, both in either direction, the bits are the same too.
TEST_CASE("Strategy.Mirrored.SplitUpdateEqualsEveryReplicaUpdating") {
  auto sgd = [](const std::vector<Tensor>& p) { return strata::optim::Sgd(p, 0.1, {.momentum = 0.9, .nesterov = true}); };
  auto adam = [](const std::vector<Tensor>& p) { return strata::optim::Adam(p, 0.01); };
  auto check = [](auto make_opt, const char* name) {
    for (int n : {2, 3, 4}) {
      CAPTURE(name);
      CAPTURE(n);
      using strata::UpdateSplit;
      const SplitRun whole = run_split(n, UpdateSplit::off, 6, make_opt);
      const SplitRun split = run_split(n, UpdateSplit::on, 6, make_opt);
      const SplitRun switching = run_split(n, UpdateSplit::measured, 6, make_opt);
      const SplitRun switching10 = run_split(n, UpdateSplit::measured, 10, make_opt);  // ways switch 3 times
      const SplitRun whole10 = run_split(n, UpdateSplit::off, 10, make_opt);
      // Sharded gradients: each replica reduces only its share; the steps that do not split
      // (switching) first complete the gradients from the other replicas.
      const auto sharded = strata::GradientLayout::sharded;
      const SplitRun split_sharded = run_split(n, UpdateSplit::on, 6, make_opt, nullptr, 0, {}, sharded);
      const SplitRun switching10_sharded =
          run_split(n, UpdateSplit::measured, 10, make_opt, nullptr, 0, equivalence::kSwitchEveryProbe, sharded);
      REQUIRE(!whole.state[0].empty());
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        CHECK(split.params[ur] == whole.params[0]);
        CHECK(split.state[ur] == whole.state[0]);
        CHECK(switching.params[ur] == whole.params[0]);
        CHECK(switching.state[ur] == whole.state[0]);
        CHECK(switching10.params[ur] == whole10.params[0]);
        CHECK(switching10.state[ur] == whole10.state[0]);
        CHECK(split_sharded.params[ur] == whole.params[0]);
        CHECK(split_sharded.state[ur] == whole.state[0]);
        CHECK(switching10_sharded.params[ur] == whole10.params[0]);
        CHECK(switching10_sharded.state[ur] == whole10.state[0]);
        // One set of state tensors between the replicas (each its own without the split).
        for (std::size_t k = 0; k < split.shared_state[ur].size(); ++k) {
          CHECK(same_tensor(split.shared_state[ur][k], split.shared_state[0][k]));
          CHECK(same_tensor(switching.shared_state[ur][k], switching.shared_state[0][k]));  // step 5 split
          if (r > 0) CHECK_FALSE(same_tensor(whole.shared_state[ur][k], whole.shared_state[0][k]));
        }
      }
      // Resumed after 6 steps from replica 0's values and state: 4 more steps end where 10
      // uninterrupted steps end.
      const SplitRun ten = run_split(n, UpdateSplit::on, 10, make_opt);
      const SplitRun resumed = run_split(n, UpdateSplit::on, 4, make_opt, &split, 6);
      // Resumed while switching (steps 6-9: split, then not), and 12 steps measured as the
      // defaults decide (the first probe at steps 5-8, whatever the timings).
      const SplitRun resumed_switching = run_split(n, UpdateSplit::measured, 4, make_opt, &split, 6);
      const SplitRun measured = run_split(n, UpdateSplit::measured, 12, make_opt, nullptr, 0, {});
      const SplitRun whole12 = run_split(n, UpdateSplit::off, 12, make_opt);
      for (int r = 0; r < n; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        CHECK(equivalence::max_relative_difference(resumed.params[ur], ten.params[0]) < 1e-5);
        CHECK(resumed.params[ur] == resumed.params[0]);
        CHECK(resumed_switching.params[ur] == resumed.params[0]);
        CHECK(resumed_switching.state[ur] == resumed.state[0]);
        for (std::size_t k = 0; r > 0 && k < resumed_switching.shared_state[ur].size(); ++k)  // the last step not
          CHECK_FALSE(same_tensor(resumed_switching.shared_state[ur][k], resumed_switching.shared_state[0][k]));
        CHECK(measured.params[ur] == whole12.params[0]);
        CHECK(measured.state[ur] == whole12.state[0]);
        for (std::size_t k = 0; k < resumed.shared_state[ur].size(); ++k)
          CHECK(same_tensor(resumed.shared_state[ur][k], resumed.shared_state[0][k]));
      }
    }
  };
  check(sgd, "sgd");
  check(adam, "adam");
}

// An SGD that cannot update parts of its parameters: under CentralStorageStrategy replica 0
// applies all of the update, as before the split.
class WholeSgd final : public strata::optim::Sgd {
 public:
  using Sgd::Sgd;
  bool updates_ranges() const noexcept override { return false; }
};

// CentralStorageStrategy: every replica updates its share of the one copy; the values, the
// state and the gradients are those of replica 0 updating all of it, bit for bit.
TEST_CASE("Strategy.CentralStorage.UpdateSplitAcrossReplicas") {
  auto run = [](int n, int steps, auto make_opt, const SplitRun* resume = nullptr, std::int64_t resume_steps = 0) {
    strata::CentralStorageStrategy strategy(n);
    return run_steps(strategy, n, steps, make_opt, resume, resume_steps);
  };
  auto whole_sgd = [](const std::vector<Tensor>& p) { return WholeSgd(p, 0.1, {.momentum = 0.9, .nesterov = true}); };
  auto sgd = [](const std::vector<Tensor>& p) { return strata::optim::Sgd(p, 0.1, {.momentum = 0.9, .nesterov = true}); };
  auto adam = [](const std::vector<Tensor>& p) { return strata::optim::Adam(p, 0.01); };
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    const SplitRun whole = run(n, 6, whole_sgd);
    const SplitRun split = run(n, 6, sgd);
    REQUIRE(!split.state[0].empty());
    CHECK(split.params[0] == whole.params[0]);
    CHECK(split.state[0] == whole.state[0]);  // what a checkpoint saves: complete
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      CHECK(split.params[ur] == split.params[0]);  // one storage
      CHECK(split.grads[ur] == whole.grads[0]);    // every replica holds the sum
      CHECK(whole.grads[ur] == whole.grads[0]);
      for (std::size_t k = 0; k < split.shared_state[ur].size(); ++k)
        CHECK(same_tensor(split.shared_state[ur][k], split.shared_state[0][k]));  // one set of state tensors
    }
    // Resumed after 6 steps from replica 0's values and state (Adam: two state tensors per
    // parameter): 4 more steps end where 10 uninterrupted steps end, on every replica.
    const SplitRun adam6 = run(n, 6, adam);
    const SplitRun adam10 = run(n, 10, adam);
    const SplitRun resumed = run(n, 4, adam, &adam6, 6);
    CHECK(resumed.params[0] == adam10.params[0]);
    CHECK(resumed.state[0] == adam10.state[0]);
  }
}

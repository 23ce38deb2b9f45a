// The update protocol (Optimizer::run_update over optim::UpdateStages) against a strategy
// side that records its stages: the order aggregate -> transform -> update -> publish, each
// layout of the update, and the non-finite policy at stage 2, checked against the update
// written out by hand.
#include "doctest.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <strata/strata.hpp>

using strata::Tensor;

namespace {

// One replica whose strategy side records what the protocol asks of it. aggregate() doubles
// every gradient, as a sum over two replicas holding the same gradient would.
class Recorder final : private strata::detail::ReplicaStep, public strata::ReplicaContext {
 public:
  Recorder() : strata::ReplicaContext(static_cast<strata::detail::ReplicaStep&>(*this)) {}
  int replica_id_in_sync_group() const noexcept override { return 0; }
  int num_replicas_in_sync() const noexcept override { return 2; }
  void all_reduce(strata::ReduceOp, Tensor&) override { stages += "all_reduce "; }

  std::string stages;
  double lr_seen = -1;
  bool updates_here = true;
  strata::detail::UpdateLayout way = strata::detail::UpdateLayout::whole();
  std::int64_t nonfinite_here = -2;

 private:
  bool aggregate(strata::Gradients g, double lr) override {
    stages += "aggregate ";
    lr_seen = lr;
    strata::NoGradGuard no_grad;
    for (std::size_t i = 0; i < g.size(); ++i) g[i].copy_(g[i] * 2.0);
    return updates_here;
  }
  std::int64_t local_nonfinite_parameter() const override { return nonfinite_here; }
  strata::detail::UpdateLayout layout(const strata::Gradients&, strata::optim::Optimizer&) override {
    stages += "layout ";
    return way;
  }
  void publish() override { stages += "publish"; }
};

struct Model {
  Tensor w = strata::from_vector<double>({2}, {1.0, -2.0}, strata::DType::f64).requires_grad_();
  Tensor b = strata::from_vector<double>({1}, {0.5}, strata::DType::f64).requires_grad_();
  std::vector<Tensor> params{w, b};
  // Gradients of sum(c * w) + 3 * b: c for w, 3 for b.
  strata::Gradients grads(std::vector<double> c) {
    const Tensor cc = strata::from_vector<double>({2}, c, strata::DType::f64);
    return strata::grad(strata::sum(cc * w) + b * 3.0, params);
  }
};

}  // namespace

TEST_CASE("Strategy.UpdateProtocol.StagesInOrder") {
  Model m;
  strata::optim::Sgd opt(m.params, 0.1);
  Recorder ctx;
  opt.apply_gradients(ctx, m.grads({1.0, 4.0}));
  CHECK(ctx.stages == "aggregate layout publish");
  CHECK(ctx.lr_seen == 0.1);
  // p -= lr * (2 g): the update reads the aggregated gradients.
  CHECK(m.w.to_vector<double>() == std::vector<double>{1.0 - 0.2 * 1.0, -2.0 - 0.2 * 4.0});
  CHECK(m.b.to_vector<double>() == std::vector<double>{0.5 - 0.2 * 3.0});
  CHECK(opt.steps() == 1);
}

TEST_CASE("Strategy.UpdateProtocol.Layouts") {
  SUBCASE("ranges: only this replica's share of each parameter") {
    Model m;
    strata::optim::Sgd opt(m.params, 0.1);
    Recorder ctx;
    const std::vector<strata::optim::ElementRange> share{{1, 2}, {0, 0}};
    ctx.way = strata::detail::UpdateLayout::share(share);
    opt.apply_gradients(ctx, m.grads({1.0, 4.0}));
    CHECK(m.w.to_vector<double>() == std::vector<double>{1.0, -2.0 - 0.2 * 4.0});
    CHECK(m.b.to_vector<double>() == std::vector<double>{0.5});
    CHECK(opt.steps() == 1);
  }
  SUBCASE("elsewhere: nothing changes here, and the step is counted") {
    Model m;
    strata::optim::Sgd opt(m.params, 0.1, 0.9);
    Recorder ctx;
    ctx.way = strata::detail::UpdateLayout::elsewhere();
    opt.apply_gradients(ctx, m.grads({1.0, 4.0}));
    CHECK(m.w.to_vector<double>() == std::vector<double>{1.0, -2.0});
    CHECK(opt.steps() == 1);
    CHECK(opt.state().empty());
  }
  SUBCASE("aggregated elsewhere: no transform, no update, but published") {
    Model m;
    strata::optim::Sgd opt(m.params, 0.1);
    Recorder ctx;
    ctx.updates_here = false;
    opt.apply_gradients(ctx, m.grads({1.0, 4.0}));
    CHECK(ctx.stages == "aggregate publish");
    CHECK(m.w.to_vector<double>() == std::vector<double>{1.0, -2.0});
    CHECK(opt.steps() == 1);
  }
}

TEST_CASE("Strategy.UpdateProtocol.NonFiniteAtTheTransformStage") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SUBCASE("skip: no update, published, counted as skipped") {
    Model m;
    strata::optim::Sgd opt(m.params, 0.1);
    opt.set_nonfinite(strata::optim::NonFinite::skip);
    Recorder ctx;
    opt.apply_gradients(ctx, m.grads({1.0, nan}));
    CHECK(ctx.stages == "aggregate publish");
    CHECK(m.w.to_vector<double>() == std::vector<double>{1.0, -2.0});
    CHECK(opt.steps() == 0);
    CHECK(opt.skipped_steps() == 1);
  }
  SUBCASE("error: names the parameter, and the replica the strategy reports") {
    Model m;
    strata::optim::Sgd opt(m.params, 0.1);
    opt.set_nonfinite(strata::optim::NonFinite::error);
    Recorder ctx;
    ctx.nonfinite_here = 1;
    std::string what;
    try {
      opt.apply_gradients(ctx, m.grads({1.0, nan}));
    } catch (const strata::data_error& e) {
      what = e.what();
    }
    CHECK(what.find("non-finite gradient in parameter 0") != std::string::npos);
    CHECK(what.find("first non-finite on replica 0 (its parameter 1)") != std::string::npos);
    CHECK(ctx.stages == "aggregate all_reduce all_reduce ");  // the two small all-reduces, then the error
  }
}

TEST_CASE("Strategy.UpdateProtocol.DeprecatedAggregateGradientsRunsStageOneOnly") {
  Model m;
  Recorder ctx;
  const strata::Gradients g = m.grads({1.0, 4.0});
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK(ctx.aggregate_gradients(g));
#pragma GCC diagnostic pop
  CHECK(ctx.stages == "aggregate ");
  CHECK(ctx.lr_seen < 0);  // no learning rate: servers keep theirs
  CHECK(m.w.grad().to_vector<double>() == std::vector<double>{2.0, 8.0});
  CHECK(m.w.to_vector<double>() == std::vector<double>{1.0, -2.0});
}

// evaluate() under the strategies of one process: over 1001 rows, under every remainder
// policy and batch splits that leave replicas uneven or empty, the counts are exactly those of
// one forward pass over the rows (equivalence::direct_figures), and the model's mode is kept.
// The multi-process strategies run the same check in multi_worker_equivalence and
// parameter_server_equivalence. Also: gather() and reduce() of numbers.
#include "doctest.hpp"

#include <string>
#include <vector>

#include "strategies/equivalence.hpp"

using namespace strata;
using data::Remainder;

namespace {

template <class S>
void check_exact(S& strategy, const char* name) {
  for (const Remainder rem : {Remainder::keep, Remainder::drop, Remainder::pad})
    for (const std::int64_t batch : {64, 1000}) {  // 1000: a last batch of one row, replicas with none
      CAPTURE(name);
      CAPTURE(static_cast<int>(rem));
      CAPTURE(batch);
      const auto want = equivalence::direct_figures(rem, batch);
      const auto got = equivalence::evaluate_figures(strategy, rem, batch);
      CHECK(got.correct == want.correct);
      CHECK(got.examples == want.examples);
      CHECK(got.confusion == want.confusion);
      CHECK(got.mean_loss == doctest::Approx(want.mean_loss).epsilon(1e-5));
      CHECK(equivalence::same_figures(got, want));
    }
}

}  // namespace

TEST_CASE("Strategy.EvaluateIsExactUnderEveryStrategyAndRemainder") {
  OneDeviceStrategy one;
  check_exact(one, "one_device");
  for (int n : {2, 3}) {
    MirroredStrategy<> mirrored(n);
    check_exact(mirrored, "mirrored");
    CentralStorageStrategy<> central(n);
    check_exact(central, "central_storage");
  }
  // An independent sanity check of the reference itself: the counts are not trivial.
  const auto ref = equivalence::direct_figures(Remainder::keep, 64);
  CHECK(ref.examples == 1001);
  CHECK(ref.correct > 100);
  CHECK(ref.correct < 1001);
}

TEST_CASE("Strategy.EvaluateRunsInInferenceModeAndRestoresTheMode") {
  MirroredStrategy<> strategy(2);
  auto net = strategy.scope([] { return nn::Sequential(nn::Linear(4, 8), nn::Dropout(0.5), nn::Linear(8, 3)); });
  const auto ds = data::TensorDataset(ones({10, 4}), from_vector<std::int64_t>({10}, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
  // Dropout off: every row of the same input gives the same logits, so one class wins them all.
  metrics::ConfusionCount confusion(3);
  evaluate(strategy, net, data::Pipeline(ds).batch(4), confusion);
  const auto c = confusion.result(strategy).to_vector<std::int64_t>();
  int columns_used = 0;
  for (int col = 0; col < 3; ++col) columns_used += (c[static_cast<std::size_t>(col)] + c[static_cast<std::size_t>(3 + col)] + c[static_cast<std::size_t>(6 + col)]) > 0;
  CHECK(columns_used == 1);
  CHECK(net.replica(0).is_training());
  CHECK(net.replica(1).is_training());
  net.eval();
  evaluate(strategy, net, data::Pipeline(ds).batch(4), confusion);
  CHECK(!net.replica(1).is_training());
}

TEST_CASE("Strategy.GatherAndReduceTakeNumbers") {
  MirroredStrategy<> strategy(3);
  auto rows = strategy.run([](ReplicaContext& ctx) { return static_cast<std::int64_t>(10 + ctx.replica_id_in_sync_group()); });
  CHECK(strategy.gather(rows) == std::vector<std::int64_t>{10, 11, 12});
  CHECK(strategy.reduce(ReduceOp::Sum, rows) == 33);
  auto halves = strategy.run([](ReplicaContext& ctx) { return 0.5f * static_cast<float>(ctx.replica_id_in_sync_group()); });
  CHECK(strategy.gather(halves) == std::vector<float>{0.0f, 0.5f, 1.0f});
  auto d = strategy.run([](ReplicaContext&) { return 2.5; });
  CHECK(strategy.gather(d) == std::vector<double>{2.5, 2.5, 2.5});
  OneDeviceStrategy one;
  CHECK(one.gather(one.run([](ReplicaContext&) { return 7; })) == std::vector<int>{7});
}

// The user's own input under the strategies of one process: a dataset of several inputs and no
// labels (a two-input regression whose target is a third input), and a per-worker input
// function, each ending where OneDeviceStrategy ends after every step of an epoch. The
// multi-process strategies run both checks in multi_worker_equivalence and
// parameter_server_equivalence.
#include "doctest.hpp"

#include <vector>

#include "strategies/equivalence.hpp"

using namespace strata;

TEST_CASE("Strategy.SeveralInputsWithoutLabelsEquivalentToOneDevice") {
  for (std::int64_t global : {25, 26}) {
    OneDeviceStrategy one;
    const auto ref = equivalence::train_two_inputs(one, global);
    for (int n : {2, 3}) {
      CAPTURE(global);
      CAPTURE(n);
      MirroredStrategy<> mirrored(n);
      CHECK(equivalence::max_relative_difference(equivalence::train_two_inputs(mirrored, global), ref) < 1e-5);
      CentralStorageStrategy<> central(n);
      CHECK(equivalence::max_relative_difference(equivalence::train_two_inputs(central, global), ref) < 1e-5);
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
  CHECK(equivalence::train_difference(one, own, ref) < 1e-6);
  for (int n : {2, 3}) {
    CAPTURE(n);
    MirroredStrategy<> mirrored(n);
    CHECK(equivalence::train_difference(mirrored, own, ref) < 1e-5);
    CentralStorageStrategy<> central(n);
    CHECK(equivalence::train_difference(central, own, ref) < 1e-5);
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

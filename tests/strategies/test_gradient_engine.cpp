// The gradient engine on its own (one rank of InProcess): buckets packed last layer first,
// the gradients written into them, the step's states, the shares of a bucket.
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

TEST_CASE("Strategy.Mirrored.GradientEngineBucketsLastLayerFirst") {
  auto comms = strata::collective::InProcess::make_group(1);
  auto net = equivalence::model(false);  // 3 Linear layers: w0 b0 w1 b1 w2 b2
  strata::GradientEngine<strata::collective::InProcess> engine(comms[0], net.parameters(), 32 * 32 * 4);
  // Packed from the last parameter back; a bucket closes once it holds >= 4 KiB.
  REQUIRE(engine.num_buckets() == 2);
  CHECK(engine.bucket_members(0) == std::vector<std::size_t>{5, 4, 3, 2});
  CHECK(engine.bucket_members(1) == std::vector<std::size_t>{1, 0});
  // The gradients live in the buckets: backward writes them there.
  Tensor x = strata::full({2, 20}, 0.5);
  auto loss = strata::sum(net(x));
  strata::grad(loss, net.parameters());
  engine.finish();
  CHECK(net.parameters()[5].grad().to_vector<float>() == std::vector<float>(5, 2.0f));
}

TEST_CASE("Strategy.Mirrored.GradientEngineStepState") {
  using Engine = strata::GradientEngine<strata::collective::InProcess>;
  auto comms = strata::collective::InProcess::make_group(1);
  auto net = equivalence::model(false);
  Engine engine(comms[0], net.parameters(), 32 * 32 * 4);
  CHECK(engine.state() == Engine::StepState::idle);
  strata::grad(strata::sum(net(strata::full({2, 20}, 0.5))), net.parameters());
  CHECK(engine.state() == Engine::StepState::open);
  // Whole layout: the step's Gradients carry the engine, so that a read waits for the buckets
  // in flight; no shares to gather.
  CHECK(engine.claim());
  CHECK_FALSE(engine.in_shares());
  engine.finish();
  CHECK_FALSE(engine.claim());
  CHECK(engine.state() == Engine::StepState::idle);
  CHECK_FALSE(engine.sharded_step());
  CHECK(engine.stats().steps == 1);
}

TEST_CASE("Strategy.Sharded.BucketBlocksPartitionEveryParameter") {
  // ShardedStrategy's layout: each bucket padded to n > 1 equal blocks of a multiple of 16
  // elements; block r's runs of the parameters, over r, tile every parameter once, in order.
  auto net = equivalence::model(false);
  for (int n : {1, 2, 3, 4, 7}) {
    const strata::detail::BucketPlan plan(net.parameters(), 32 * 32 * 4, n);
    for (std::size_t b = 0; b < plan.buckets().size(); ++b) {
      std::size_t used = 0;
      for (std::size_t k : plan.buckets()[b].members) used += static_cast<std::size_t>(net.parameters()[k].numel());
      CHECK((n == 1 || plan.block(b) % 16 == 0));  // (one block: the bucket as it is)
      CHECK(plan.block(b) * static_cast<std::size_t>(n) == plan.buckets()[b].count);
      CHECK(plan.buckets()[b].count >= used);
      CHECK(plan.buckets()[b].count < used + 16 * static_cast<std::size_t>(n) + static_cast<std::size_t>(n));
    }
    std::vector<std::int64_t> next(net.parameters().size(), 0);
    for (int r = 0; r < n; ++r) {
      const auto mine = plan.block_ranges(r);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        CHECK((mine[k].begin == next[k] || mine[k].begin == mine[k].end));
        if (mine[k].end > mine[k].begin) next[k] = mine[k].end;
      }
    }
    for (std::size_t k = 0; k < next.size(); ++k) CHECK(next[k] == net.parameters()[k].numel());
  }
}

TEST_CASE("Strategy.Mirrored.BucketSharesPartitionEveryParameter") {
  auto net = equivalence::model(false);
  const strata::detail::BucketPlan plan(net.parameters(), 32 * 32 * 4);
  for (int n : {1, 2, 3, 5}) {
    std::vector<std::int64_t> next(net.parameters().size(), 0);  // where replica r's range must begin
    for (int r = 0; r < n; ++r) {
      const auto shares = plan.shares(r, n);
      for (std::size_t k = 0; k < shares.size(); ++k) {
        CHECK(shares[k].begin == next[k]);
        CHECK(shares[k].end >= shares[k].begin);
        next[k] = shares[k].end;
      }
    }
    for (std::size_t k = 0; k < next.size(); ++k) CHECK(next[k] == net.parameters()[k].numel());
  }
}

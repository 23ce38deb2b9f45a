// MirroredStrategy and CentralStorageStrategy: N replica threads on global batch B end where
// OneDeviceStrategy ends on batch B (the equivalence property), with gradient accumulation
// too; the replicas' copies stay identical; the gradient engine's buckets; misuse is named.
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

static_assert(strata::Strategy<strata::MirroredStrategy<>>);
static_assert(strata::Strategy<strata::CentralStorageStrategy<>>);

using equivalence::one_device_reference;

TEST_CASE("Strategy.Mirrored.EquivalentToOneDevice") {
  for (bool conv : {false, true})
    for (int k : {1, 2}) {
      equivalence::Setup s;
      s.conv = conv;
      s.accumulation = k;
      std::vector<double> ref_losses;
      const auto ref = one_device_reference(s, &ref_losses);
      // Small buckets, so the MLP spreads over several and their order matters. Whole
      // gradients (the default), and sharded ones (each replica reduces only its share) with
      // the update split in every step and switching between split and whole.
      using strata::GradientLayout, strata::UpdateSplit;
      const strata::MirroredOptions whole{.bucket_bytes = 2048};
      const strata::MirroredOptions sharded{.bucket_bytes = 2048, .split_update = UpdateSplit::on,
                                            .gradients = GradientLayout::sharded};
      const strata::MirroredOptions sharded_switching{.bucket_bytes = 2048,
                                                      .split_update = UpdateSplit::measured,
                                                      .split_choice = equivalence::kSwitchEveryProbe,
                                                      .gradients = GradientLayout::sharded};
      for (const auto& layout_options : {std::pair{"whole", whole}, std::pair{"sharded", sharded},
                                         std::pair{"sharded, switching", sharded_switching}})
        for (int n : {2, 3, 4}) {
          const char* layout = layout_options.first;
          const strata::MirroredOptions& options = layout_options.second;
          CAPTURE(conv);
          CAPTURE(k);
          CAPTURE(n);
          CAPTURE(layout);
          strata::MirroredStrategy strategy(n, options);
          std::vector<double> losses;
          const auto got = equivalence::train_steps(strategy, s, &losses);
          CHECK(equivalence::max_relative_difference(got, ref) < 1e-5);
          REQUIRE(losses.size() == ref_losses.size());
          for (std::size_t i = 0; i < losses.size(); ++i)
            CHECK(losses[i] == doctest::Approx(ref_losses[i]).epsilon(1e-5));
        }
    }
}

// RowSplit::measured: a replica slowed down in proportion to its rows is given fewer of them,
// and the run still ends where one device ends (whole and sharded gradients, accumulation
// 1 and 2).
TEST_CASE("Strategy.Mirrored.MeasuredRowsFollowSpeedAndTrainTheSame") {
  using strata::GradientLayout, strata::RowSplit;
  for (int k : {1, 2})
    for (GradientLayout layout : {GradientLayout::whole, GradientLayout::sharded})
      for (int n : {2, 3}) {
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(layout == GradientLayout::sharded);
        equivalence::Setup s;
        s.accumulation = k;
        std::vector<double> ref_losses;
        const auto ref = one_device_reference(s, &ref_losses);
        const int slow = n - 1;
        std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(n));  // [replica][step]
        s.on_replica_rows = [&](int r, std::int64_t count) {
          rows[static_cast<std::size_t>(r)].push_back(count);
          if (r == slow) std::this_thread::sleep_for(std::chrono::microseconds(300 * count));
        };
        strata::MirroredStrategy strategy(n, {.bucket_bytes = 2048, .gradients = layout, .rows = RowSplit::measured});
        std::vector<double> losses;
        const auto got = equivalence::train_steps(strategy, s, &losses);
        CHECK(equivalence::max_relative_difference(got, ref) < 1e-5);
        REQUIRE(losses.size() == ref_losses.size());
        for (std::size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == doctest::Approx(ref_losses[i]).epsilon(1e-5));
        // Steps 0..2 are even (the warm-up); the full batches after step 10 give the slow
        // replica less than an even share, and never less than half of one.
        REQUIRE(rows[0].size() == 21);
        const std::int64_t even = 26 / n;
        for (std::size_t step = 10; step < 20; ++step) {
          CAPTURE(step);
          std::int64_t total = 0;
          for (const auto& r : rows) total += r[step];
          CHECK(total == 26);
          CHECK(rows[static_cast<std::size_t>(slow)][step] < even);
          CHECK(2 * rows[static_cast<std::size_t>(slow)][step] >= even - 1);
        }
      }
}

// Read through Gradients before apply_gradients, sharded gradients are whole: the bits the
// whole layout gives every replica, and they stay whole after it. Not read before it,
// apply_gradients consumes them, and a read after it is an error that says so. The sharded
// layout without the split update is refused.
TEST_CASE("Strategy.Mirrored.ShardedGradientsWholeWhenRead") {
  using strata::GradientLayout;
  for (int n : {2, 3}) {
    CAPTURE(n);
    // `before`: read the gradients before apply_gradients; `after`: replica 0's read after it
    // (its first gradient, or the error).
    auto read = [&](GradientLayout layout, bool before, std::vector<std::string>* after) {
      strata::MirroredStrategy strategy(n, {.bucket_bytes = 2048, .gradients = layout});
      strata::manual_seed(5);
      auto net = strategy.scope([] { return equivalence::model(false); });
      auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1, {.momentum = 0.9}); });
      equivalence::Setup s;
      auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26).take(3));
      std::vector<std::vector<std::vector<float>>> seen(static_cast<std::size_t>(n));  // [replica][step * params]
      for (auto& batch : data)
        strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          auto grads = strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size), net.parameters());
          auto& mine = seen[static_cast<std::size_t>(ctx.replica_id_in_sync_group())];
          if (before)
            for (std::size_t i = 0; i < grads.size(); ++i) mine.push_back(grads[i].to_vector<float>());
          opt.apply_gradients(ctx, grads);
          if (after && ctx.replica_id_in_sync_group() == 0) {
            try {
              const std::vector<float> g = grads[0].to_vector<float>();
              after->push_back(g == mine.at(mine.size() - grads.size()) ? "the same" : "changed");
            } catch (const strata::invalid_argument& e) {
              after->push_back(e.what());
            }
          }
        }, batch);
      return seen;
    };
    const auto whole = read(GradientLayout::whole, true, nullptr);
    std::vector<std::string> after_read, after_unread;
    const auto sharded = read(GradientLayout::sharded, true, &after_read);
    (void)read(GradientLayout::sharded, false, &after_unread);
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      REQUIRE(whole[ur].size() == 3 * 6);
      CHECK(whole[ur] == whole[0]);  // every replica holds the whole sum
      CHECK(sharded[ur] == whole[0]);
    }
    CHECK(after_read == std::vector<std::string>(3, "the same"));
    REQUIRE(after_unread.size() == 3);
    for (const std::string& what : after_unread) CHECK(what.find("read after apply_gradients") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(strata::MirroredStrategy(2, {.split_update = strata::UpdateSplit::off,
                                                    .gradients = GradientLayout::sharded}),
                       doctest::Contains("needs the split update"), strata::invalid_argument);
}

// The last batch padded to full size (10 examples + 16 padding rows: some replicas get only
// padding) trains exactly as the partial batch does on one device.
TEST_CASE("Strategy.Mirrored.PaddedLastBatchEquivalentToPartial") {
  equivalence::Setup s;
  const auto ref = one_device_reference(s);
  s.remainder = strata::data::Remainder::pad;
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    strata::MirroredStrategy strategy(n);
    CHECK(equivalence::train_difference(strategy, s, ref) < 1e-5);
  }
  strata::OneDeviceStrategy one;
  CHECK(equivalence::train_difference(one, s, ref) < 1e-6);
}

TEST_CASE("Strategy.CentralStorage.EquivalentToOneDevice") {
  for (int k : {1, 2}) {
    equivalence::Setup s;
    s.accumulation = k;
    const auto ref = one_device_reference(s);
    for (int n : {2, 3, 4}) {
      CAPTURE(k);
      CAPTURE(n);
      strata::CentralStorageStrategy strategy(n);
      CHECK(equivalence::train_difference(strategy, s, ref) < 1e-5);
    }
  }
}

/// Mirrored and CentralStorage over n replicas both train s to within 1e-5 of one device (ref).
static void check_mirrored_and_central(int n, const equivalence::Setup& s, const std::vector<std::vector<float>>& ref) {
  strata::MirroredStrategy mirrored(n);
  CHECK(equivalence::train_difference(mirrored, s, ref) < 1e-5);
  strata::CentralStorageStrategy central(n);
  CHECK(equivalence::train_difference(central, s, ref) < 1e-5);
}

/// The plain setup on a global batch of `global`, with `loss`.
static equivalence::Setup setup(std::int64_t global, equivalence::Loss loss = equivalence::Loss::cross_entropy) {
  equivalence::Setup s;
  s.global_batch = global;
  s.loss = loss;
  return s;
}

TEST_CASE("Strategy.ScheduleEquivalentToOneDevice") {
  equivalence::Setup s;
  s.schedule = true;
  s.global_batch = 25;
  const auto ref = one_device_reference(s);
  CHECK(equivalence::max_relative_difference(one_device_reference(setup(25)), ref) > 1e-3);
  for (int n : {2, 3}) {
    CAPTURE(n);
    check_mirrored_and_central(n, s, ref);
  }
}

TEST_CASE("Strategy.GlobalNormClippingEquivalentToOneDevice") {
  equivalence::Setup s;
  s.clip_norm = 0.5;
  s.global_batch = 25;
  const auto ref = one_device_reference(s);
  CHECK(equivalence::max_relative_difference(one_device_reference(setup(25)), ref) > 1e-3);
  // The clip multi_worker_equivalence and parameter_server_equivalence run changes the result too.
  equivalence::Setup smoothed = setup(25, equivalence::Loss::smoothed_cross_entropy);
  const auto unclipped = one_device_reference(smoothed);
  smoothed.clip_norm = 0.1;
  CHECK(equivalence::max_relative_difference(one_device_reference(smoothed), unclipped) > 1e-3);
  for (int n : {2, 3}) {
    CAPTURE(n);
    strata::MirroredStrategy mirrored(n);
    CHECK(equivalence::train_difference(mirrored, s, ref) < 1e-5);
    // Sharded gradients with the update split (each replica updates its share), small buckets.
    strata::MirroredStrategy sharded(n, {.bucket_bytes = 2048, .split_update = strata::UpdateSplit::on,
                                         .gradients = strata::GradientLayout::sharded});
    CHECK(equivalence::train_difference(sharded, s, ref) < 1e-5);
    strata::MirroredStrategy split(n, {.bucket_bytes = 2048, .split_update = strata::UpdateSplit::on});
    CHECK(equivalence::train_difference(split, s, ref) < 1e-5);
    strata::CentralStorageStrategy central(n);
    CHECK(equivalence::train_difference(central, s, ref) < 1e-5);
  }
}

TEST_CASE("Strategy.EveryLossEquivalentToOneDevice") {
  // MSE regression and a label-smoothed cross-entropy through compute_average_loss, on a
  // global batch of 25 (uneven over 2 and 3 replicas) and 26 (uneven over 3).
  for (auto loss : {equivalence::Loss::mse, equivalence::Loss::smoothed_cross_entropy})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.loss = loss;
      s.global_batch = global;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3}) {
        CAPTURE(static_cast<int>(loss));
        CAPTURE(global);
        CAPTURE(n);
        check_mirrored_and_central(n, s, ref);
      }
    }
}

TEST_CASE("Strategy.DropoutEquivalentToOneDevice") {
  // A model with Dropout: every example draws the mask it draws on one device, whichever
  // replica runs it, on global batches uneven over 2 and 3 replicas, and with a replica's rows
  // in two micro-batches (k = 2) against one device's whole batch.
  for (bool conv : {false, true})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.dropout = true;
      s.conv = conv;
      s.global_batch = global;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3})
        for (int k : {1, 2}) {
          CAPTURE(conv);
          CAPTURE(global);
          CAPTURE(n);
          CAPTURE(k);
          equivalence::Setup sk = s;
          sk.accumulation = k;
          check_mirrored_and_central(n, sk, ref);
        }
    }
}

TEST_CASE("Strategy.SyncBatchNormEquivalentToOneDevice") {
  // SyncBatchNorm's statistics span the global batch, so N replicas normalise as one device
  // does over the whole batch: parameters and running statistics equal after 20 steps, on
  // global batches uneven over 2 and 3 replicas (the last batch of 10 rows over 3 replicas).
  for (bool conv : {false, true})
    for (std::int64_t global : {25, 26}) {
      equivalence::Setup s;
      s.sync_batch_norm = true;
      s.conv = conv;
      s.global_batch = global;
      s.examples = 20 * global + 10;
      const auto ref = one_device_reference(s);
      for (int n : {2, 3}) {
        CAPTURE(conv);
        CAPTURE(global);
        CAPTURE(n);
        check_mirrored_and_central(n, s, ref);
      }
    }
}

TEST_CASE("Strategy.SparseTableEquivalentToOneDevice") {
  // A table with row-sparse gradients, updated lazily (momentum only on the rows a step's
  // global batch looked up): N replicas update the rows one device does, though each
  // replica looks up rows of its own, whether the engine sums the table by gathering rows or
  // densely. And the dense rule on row-sparse gradients is a run with dense gradients.
  for (std::int64_t global : {25, 26}) {
    equivalence::Setup s;
    s.table = true;
    s.global_batch = global;
    s.examples = 20 * global + 10;
    const auto ref = one_device_reference(s);
    equivalence::Setup dense = s, dense_rule = s;
    dense.table_gradient = strata::TableGradient::dense;
    dense_rule.sparse_updates = strata::optim::SparseUpdates::dense;
    const auto dense_ref = one_device_reference(dense);
    CHECK(equivalence::max_relative_difference(one_device_reference(dense_rule), dense_ref) == 0);
    CHECK(equivalence::max_relative_difference(ref, dense_ref) > 1e-3);  // lazy momentum is another rule
    for (const char* way : {"gather", "dense"}) {
      const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", way);
      const bool gather = std::string_view(way) == "gather";
      for (int n : {2, 3})
        for (int k : {1, 2}) {
          CAPTURE(global);
          CAPTURE(way);
          CAPTURE(n);
          CAPTURE(k);
          equivalence::Setup sk = s;
          sk.accumulation = k;
          strata::MirroredStrategy mirrored(n);
          CHECK(equivalence::train_difference(mirrored, sk, ref) < 1e-5);
          const strata::GradientStats st = mirrored.gradient_stats();
          CHECK(st.tables_gathered == (gather ? st.steps : 0));  // the way asked for, every step
          CHECK(st.tables_dense == (gather ? 0 : st.steps));
          CHECK(st.table_touched_bytes > 0);
          strata::MirroredStrategy split(n, {.split_update = strata::UpdateSplit::on});
          CHECK(equivalence::train_difference(split, sk, ref) < 1e-5);
          strata::CentralStorageStrategy central(n);
          CHECK(equivalence::train_difference(central, sk, ref) < 1e-5);
        }
    }
    for (int n : {2, 3})  // sharded sums: the table is one more dense bucket
      for (int k : {1, 2}) {
        equivalence::Setup sk = s;
        sk.accumulation = k;
        strata::MirroredStrategy sharded(n, {.split_update = strata::UpdateSplit::on,
                                             .gradients = strata::GradientLayout::sharded});
        CHECK(equivalence::train_difference(sharded, sk, ref) < 1e-5);
        CHECK(sharded.gradient_stats().tables_gathered + sharded.gradient_stats().tables_dense == 0);
      }
  }
}

TEST_CASE("Strategy.Mirrored.CopiesStayIdenticalAndResolvePerReplica") {
  strata::MirroredStrategy strategy(3);
  strata::manual_seed(3);
  auto net = strategy.scope([] { return equivalence::model(false); });
  REQUIRE(net.num_replicas() == 3);
  // Distinct copies with equal values.
  for (std::size_t r = 1; r < 3; ++r)
    for (std::size_t k = 0; k < net.replica(0).parameters().size(); ++k) {
      CHECK_FALSE(same_tensor(net.replica(r).parameters()[k], net.replica(0).parameters()[k]));
      CHECK(net.replica(r).parameters()[k].to_vector<float>() == net.replica(0).parameters()[k].to_vector<float>());
    }
  // Inside run, `net` is the running replica's copy.
  auto ids = strategy.run([&](strata::ReplicaContext& ctx) {
    const Tensor& mine = net.parameters()[0];
    const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
    return same_tensor(mine, net.replica(r).parameters()[0]) ? 1.0 : 0.0;
  });
  CHECK(strategy.reduce(strata::ReduceOp::Sum, ids) == 3.0);
  // After training steps the copies are still bitwise equal: every replica applies the same update.
  equivalence::Setup s;
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1, 0.9); });
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26).take(5));
  for (auto& batch : data)
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
  for (std::size_t r = 1; r < 3; ++r)
    for (std::size_t k = 0; k < net.replica(0).parameters().size(); ++k)
      CHECK(net.replica(r).parameters()[k].to_vector<float>() == net.replica(0).parameters()[k].to_vector<float>());
}

TEST_CASE("Strategy.ReduceTakesAnyArithmeticPerReplica") {
  auto check = [](auto& strategy, int n) {
    // count_correct's int64_t, a float and an int, as run() returns them.
    auto counts = strategy.run([](strata::ReplicaContext& ctx) { return std::int64_t{ctx.replica_id_in_sync_group() + 1}; });
    const std::int64_t total = strategy.reduce(strata::ReduceOp::Sum, counts);
    CHECK(total == n * (n + 1) / 2);
    auto f = strategy.run([](strata::ReplicaContext& ctx) { return 0.5f * static_cast<float>(ctx.replica_id_in_sync_group()); });
    const float largest = strategy.reduce(strata::ReduceOp::Max, f);
    CHECK(largest == 0.5f * static_cast<float>(n - 1));
    auto big = strata::PerReplica<std::int64_t>(static_cast<std::size_t>(n));
    for (auto& v : big) v = std::int64_t{1} << 52;  // integers stay exact up to 2^53
    CHECK(strategy.reduce(strata::ReduceOp::Sum, big) == static_cast<std::int64_t>(n) << 52);
  };
  strata::OneDeviceStrategy one;
  check(one, 1);
  strata::MirroredStrategy mirrored(3);
  check(mirrored, 3);
  strata::CentralStorageStrategy central(2);
  check(central, 2);
}

TEST_CASE("Strategy.Mirrored.ReduceAndAllReduce") {
  strata::MirroredStrategy strategy(4);
  auto v = strategy.run([](strata::ReplicaContext& ctx) {
    Tensor t = strata::full({3}, static_cast<double>(ctx.replica_id_in_sync_group() + 1));
    ctx.all_reduce(strata::ReduceOp::Max, t);  // 4 everywhere
    return t;
  });
  CHECK(strategy.reduce(strata::ReduceOp::Sum, v).to_vector<float>() == std::vector<float>{16, 16, 16});
  auto ids = strategy.run([](strata::ReplicaContext& ctx) { return static_cast<double>(ctx.replica_id_in_sync_group()); });
  CHECK(strategy.reduce(strata::ReduceOp::Mean, ids) == 1.5);
  CHECK(strategy.reduce(strata::ReduceOp::Max, ids) == 3.0);
}

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
  CHECK(engine.state() == Engine::StepState::open);  // whole layout: no shares to claim
  CHECK_FALSE(engine.claim());
  engine.finish();
  CHECK(engine.state() == Engine::StepState::idle);
  CHECK_FALSE(engine.sharded_step());
  CHECK(engine.stats().steps == 1);
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

TEST_CASE("Strategy.Mirrored.MisuseIsNamed") {
  strata::MirroredStrategy strategy(2);
  auto net = strategy.scope([] { return equivalence::model(false); });
  // reduce() inside a replica's step would wait for replicas that are inside their steps.
  CHECK_THROWS_WITH_AS(strategy.run([&](strata::ReplicaContext&) {
    strata::PerReplica<double> v(2);
    return strategy.reduce(strata::ReduceOp::Sum, v);
  }), doctest::Contains("cross-replica"), strata::invalid_argument);
  // A replica that throws fails the step on every replica instead of leaving them waiting;
  // the error that reaches the caller is the replica's own.
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  CHECK_THROWS_WITH(strategy.run([&](strata::ReplicaContext& ctx) {
    if (ctx.replica_id_in_sync_group() == 1) throw std::runtime_error("replica 1 broke");
    Tensor x = strata::full({2, 20}, 0.5);
    opt.apply_gradients(ctx, strata::grad(strata::sum(net(x)), net.parameters()));
  }), "replica 1 broke");
  CHECK_THROWS_AS(strata::MirroredStrategy(0), strata::invalid_argument);
  CHECK(strata::MirroredStrategy(std::vector{strata::Device::cpu(), strata::Device::cpu()}).num_replicas_in_sync() == 2);
  CHECK_THROWS_WITH_AS(strata::MirroredStrategy(std::vector{strata::Device::cpu(), strata::Device::cuda(0)}),
                       doctest::Contains("GPU replicas are MirroredStrategy<collective::Nccl>"), strata::invalid_argument);
  CHECK_THROWS_AS(strata::MirroredStrategy(17), strata::invalid_argument);
}

TEST_CASE("Strategy.Mirrored.GatherConcatenatesInReplicaOrder") {
  strata::MirroredStrategy strategy(3);
  auto v = strategy.run([](strata::ReplicaContext& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    return strata::full({r + 1, 2}, static_cast<double>(r));  // replica r: r+1 rows of r
  });
  const Tensor all = strategy.gather(v);
  CHECK(all.shape() == strata::Shape{6, 2});
  CHECK(all.to_vector<float>() == std::vector<float>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
  strata::PerReplica<Tensor> bad(3);
  for (std::size_t r = 0; r < 3; ++r) bad[r] = strata::full({1, static_cast<std::int64_t>(r) + 1}, 0.0);
  CHECK_THROWS_WITH_AS(strategy.gather(bad), doctest::Contains("only axis 0 may differ"), strata::invalid_argument);
  strata::CentralStorageStrategy central(2);
  auto w = central.run([](strata::ReplicaContext& ctx) {
    return strata::full({1}, static_cast<double>(ctx.replica_id_in_sync_group() + 5));
  });
  CHECK(central.gather(w).to_vector<float>() == std::vector<float>{5, 6});
}

TEST_CASE("Strategy.Mirrored.EmptyReplicaBatch") {
  // A last global batch smaller than the replica count leaves some replicas no rows: they
  // still take part, with zero gradients, and the result equals one device's.
  equivalence::Setup s;
  s.examples = 26 * 3 + 2;  // the last batch has 2 examples for 4 replicas
  strata::OneDeviceStrategy one;
  const auto ref = equivalence::train_steps(one, s);
  strata::MirroredStrategy strategy(4);
  CHECK(equivalence::train_difference(strategy, s, ref) < 1e-5);
}

// RELIABILITY D3: a NaN (then an Inf) in one replica's gradients at one step. Skip: every
// replica skips that step together — parameters bitwise unchanged and equal everywhere, the
// skip counted alike — and training goes on. Error: every replica stops naming the parameter.
TEST_CASE("Strategy.Mirrored.NonFiniteGradientsSkippedTogether") {
  for (auto layout : {strata::GradientLayout::whole, strata::GradientLayout::sharded})
  for (double poison : {std::nan(""), static_cast<double>(INFINITY)}) {
    CAPTURE(poison);
    CAPTURE(static_cast<int>(layout));
    strata::MirroredStrategy strategy(2, {.gradients = layout});
    strata::manual_seed(3);
    auto net = strategy.scope([] { return equivalence::model(false); });
    auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1, {.momentum = 0.9}); });
    for (int r = 0; r < 2; ++r) opt.replica(static_cast<std::size_t>(r)).set_nonfinite(strata::optim::NonFinite::skip);
    equivalence::Setup s;
    auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26));
    auto values = [&](int r) {
      std::vector<std::vector<float>> out;
      for (const Tensor& p : net.replica(static_cast<std::size_t>(r)).parameters()) out.push_back(p.to_vector<float>());
      return out;
    };
    int step = 0;
    std::vector<std::vector<float>> before;
    for (auto& batch : data) {
      if (step == 3) before = values(0);
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        Tensor loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
        if (step == 3 && ctx.replica_id_in_sync_group() == 1) loss = loss * poison;
        opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
      }, batch);
      if (step == 3) {
        CHECK(values(0) == before);  // the poisoned step changed nothing
        CHECK(values(1) == before);
      }
      if (++step == 6) break;
    }
    for (int r = 0; r < 2; ++r) {
      CHECK(opt.replica(static_cast<std::size_t>(r)).skipped_steps() == 1);
      CHECK(opt.replica(static_cast<std::size_t>(r)).steps() == 5);
    }
    CHECK(values(0) == values(1));
    CHECK(values(0) != before);  // the other steps trained
  }
  // Error: the step fails on every replica, naming the parameter.
  strata::MirroredStrategy strategy(2);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  for (int r = 0; r < 2; ++r) opt.replica(static_cast<std::size_t>(r)).set_nonfinite(strata::optim::NonFinite::error);
  equivalence::Setup s;
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26));
  try {
    for (auto& batch : data)
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        Tensor loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
        if (ctx.replica_id_in_sync_group() == 1) loss = loss * std::nan("");
        opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
      }, batch);
    FAIL_CHECK("no error");
  } catch (const strata::data_error& e) {
    CHECK(std::string(e.what()).find("[strata.optim.nonfinite] non-finite gradient in parameter 0 (shape [32, 20]) at step 0") !=
          std::string::npos);
    // The replica it came from: its own gradients were looked at before the sum.
    CHECK(std::string(e.what()).find("first non-finite on replica 1 (its parameter 0)") != std::string::npos);
  }
  // Three replicas, the NaN on replica 2's last parameter only: named as such.
  strata::MirroredStrategy three(3);
  auto net3 = three.scope([] { return equivalence::model(false); });
  auto opt3 = three.scope([&] { return strata::optim::Sgd(net3.parameters(), 0.1); });
  for (int r = 0; r < 3; ++r) opt3.replica(static_cast<std::size_t>(r)).set_nonfinite(strata::optim::NonFinite::error);
  auto data3 = three.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(27));
  std::vector<std::string> errors(3);
  try {
    for (auto& batch : data3)
      three.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        Tensor loss = equivalence::replica_loss(net3, b.x, b.y, b.global_size);
        if (ctx.replica_id_in_sync_group() == 2)  // a NaN in the last parameter's gradient only
          loss = loss + strata::sum(net3.parameters().back()) * std::nan("");
        auto grads = strata::grad(loss, net3.parameters());
        try {
          opt3.apply_gradients(ctx, grads);
        } catch (const strata::data_error& e) {
          errors[static_cast<std::size_t>(ctx.replica_id_in_sync_group())] = e.what();
          throw;
        }
      }, batch);
    FAIL_CHECK("no error");
  } catch (const strata::data_error&) {
  }
  const std::string last = std::to_string(net3.parameters().size() - 1);
  for (const std::string& e : errors) {  // every replica stops, with the same message
    INFO(e);
    CHECK(e.find("non-finite gradient in parameter " + last) != std::string::npos);
    CHECK(e.find("first non-finite on replica 2 (its parameter " + last + ")") != std::string::npos);
  }
}

// The input pipeline gets a producer thread only when a core is left over for it; a depth the
// user chose stays.
TEST_CASE("Strategy.Mirrored.PrefetchesOnlyWithACoreToSpare") {
  const auto p = strata::data::Pipeline(equivalence::dataset({})).batch(4);
  const unsigned cores = std::thread::hardware_concurrency();
  for (int replicas : {1, 2, 3}) {
    strata::MirroredStrategy<> strategy(replicas);
    CHECK(strategy.distribute(p).options().prefetch == (cores > static_cast<unsigned>(replicas) ? 2 : 0));
    CHECK(strategy.distribute(p.prefetch(3)).options().prefetch == 3);
    // Without a producer thread, the replica threads copy each batch's rows.
    CHECK((strategy.distribute(p).options().parallel != nullptr) == (replicas > 1 && cores <= static_cast<unsigned>(replicas)));
  }
}

// The replica threads copy a batch's rows between steps: the same batches as one thread
// copying them; while the pool runs a step, the caller copies them alone.
TEST_CASE("Strategy.Mirrored.ReplicaThreadsCopyTheBatchRows") {
  const std::int64_t n = 150, width = 2048;  // 8 KiB rows: a batch of 16 is copied in parts
  std::vector<double> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < width; ++j) xs.push_back(static_cast<double>(i * width + j));
    ys.push_back(static_cast<double>(i % 10));
  }
  const strata::data::TensorDataset ds(strata::from_vector<double>({n, width}, xs, strata::DType::f32),
                                       strata::from_vector<double>({n}, ys, strata::DType::i64));
  auto pool = std::make_shared<strata::detail::ReplicaPool>(3);
  const auto plain = strata::data::Pipeline(ds).shuffle(1).batch(16);
  auto parallel = plain.parallel_rows(std::make_shared<strata::detail::ReplicaPoolRows>(pool));
  auto all_x = [](strata::data::Pipeline q) {
    std::vector<float> out;
    for (const auto& b : q)
      for (float v : b.x.to_vector<float>()) out.push_back(v);
    return out;
  };
  const std::vector<float> want = all_x(plain);
  CHECK(all_x(parallel) == want);

  // A step in flight on another thread: the pool is busy, the rows are copied here.
  std::atomic<bool> release{false}, started{false};
  std::thread stepper([&] {
    auto job = [&](int r) {
      if (r == 0) started = true;
      while (!release.load()) std::this_thread::yield();
    };
    auto on_error = [](int, const char*) {};
    pool->run(job, on_error);
  });
  while (!started.load()) std::this_thread::yield();
  CHECK(all_x(parallel) == want);
  release = true;
  stepper.join();

  // A prefetching thread and the steps share the pool: each waits its turn, nothing fails.
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  std::thread stepping([&] {
    auto job = [&](int r) {
      if (r == 0) ++steps;
    };
    auto on_error = [](int, const char*) {};
    while (!stop.load()) pool->run(job, on_error);
  });
  // The steps are under way before the prefetching starts (on a loaded machine the thread
  // could otherwise first run after the epoch was read).
  while (steps.load() == 0) std::this_thread::yield();
  CHECK(all_x(parallel.prefetch(2)) == want);
  stop = true;
  stepping.join();

  // Once the pool is gone, the rows are copied here too.
  pool.reset();
  CHECK(all_x(parallel) == want);
}

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

// Each replica updates its share and writes it into the others' copies (SplitUpdate): every
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

// RELIABILITY D3 under CentralStorageStrategy: a NaN in one replica's gradients at one step is
// skipped by every replica together, and the step counts stay alike.
TEST_CASE("Strategy.CentralStorage.NonFiniteGradientsSkippedTogether") {
  strata::CentralStorageStrategy strategy(3);
  strata::manual_seed(3);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1, {.momentum = 0.9}); });
  for (std::size_t r = 0; r < 3; ++r) opt.replica(r).set_nonfinite(strata::optim::NonFinite::skip);
  equivalence::Setup s;
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26));
  auto values = [&] {
    std::vector<std::vector<float>> out;
    for (const Tensor& p : net.replica(0).parameters()) out.push_back(p.to_vector<float>());
    return out;
  };
  int step = 0;
  std::vector<std::vector<float>> before;
  for (auto& batch : data) {
    if (step == 3) before = values();
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      Tensor loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      if (step == 3 && ctx.replica_id_in_sync_group() == 2) loss = loss * std::nan("");
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    if (step == 3) CHECK(values() == before);  // the poisoned step changed nothing
    if (++step == 6) break;
  }
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(opt.replica(r).skipped_steps() == 1);
    CHECK(opt.replica(r).steps() == 5);
  }
  CHECK(values() != before);  // the other steps trained
}

// write_job_timeline in one process (threads as replicas): offset 0, one trace, the events once.
TEST_CASE("Strategy.Mirrored.JobTimelineInOneProcess") {
  strata::MirroredStrategy strategy(3);
  CHECK(strata::chief_clock_offset(strategy) == 0);
  auto& timeline = strata::observe::Timeline::instance();
  timeline.start(0);
  strategy.run([](strata::ReplicaContext&) { strata::observe::ScopedEvent ev("job timeline test", "test"); });
  const auto path = std::filesystem::temp_directory_path() / "strata_mirrored_job_timeline.json";
  strata::write_job_timeline(strategy, path.string());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::size_t spans = 0, names = 0;
  for (std::size_t at = 0; (at = s.find("\"job timeline test\"", at)) != std::string::npos; ++at) ++spans;
  for (std::size_t at = 0; (at = s.find("\"process_name\"", at)) != std::string::npos; ++at) ++names;
  CHECK(spans == 3);  // one per replica thread, written once
  CHECK(names == 1);
  CHECK(s.rfind("{\"traceEvents\":[\n", 0) == 0);
  CHECK(s.find(",\n]") == std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("Strategy.BatchNormPerReplica: each replica's rows normalised alone, running statistics global and equal") {
  // Per-replica BatchNorm (DDP's default): the replicas' outputs differ from one device's over
  // the whole batch, but their running statistics follow the global batch's, so after the first
  // step (same parameters everywhere) they equal one device's, and they stay equal on every
  // replica after that.
  const auto make = [] {
    strata::manual_seed(5);
    return strata::nn::Sequential(strata::nn::Linear(6, 4), strata::nn::BatchNorm1d(4), strata::nn::ReLU(),
                                  strata::nn::Linear(4, 2));
  };
  strata::Generator g(8);
  const Tensor x = strata::uniform({60, 6}, -1, 1, g);
  const Tensor y = strata::from_vector<std::int64_t>({60}, std::vector<std::int64_t>(60, 1));
  const strata::data::TensorDataset data(x, y);
  auto one_model = make();
  (void)one_model(strata::slice(x, 0, 0, 25));  // one device, the first step's forward over its 25 rows
  const auto want_mean = one_model.buffers()[0].to_vector<float>(), want_var = one_model.buffers()[1].to_vector<float>();
  strata::MirroredStrategy strategy(3);
  auto net = strategy.scope(make);
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  int steps = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(data).batch(25))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = strata::nn::cross_entropy(net(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    if (++steps == 1)
      for (std::size_t r = 0; r < 3; ++r) {
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[0].to_vector<float>()}, {want_mean}) < 1e-6);
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[1].to_vector<float>()}, {want_var}) < 1e-6);
      }
  }
  CHECK(steps == 3);  // 25, 25 and 10 rows over 3 replicas
  for (std::size_t r = 1; r < 3; ++r)
    for (std::size_t k = 0; k < net.replica(0).buffers().size(); ++k)
      CHECK(net.replica(r).buffers()[k].to_vector<float>() == net.replica(0).buffers()[k].to_vector<float>());
  CHECK(net.replica(0).buffers()[2].to_vector<float>()[0] == 3.0f);  // num_batches_tracked
}

TEST_CASE("Strategy.BatchNormPerReplica: running statistics settle in order at the step's end, and before an "
          "evaluation-mode norm reads them") {
  // Three training-mode norms then evaluation-mode ones in each step (equivalence::TwoNorms):
  // the evaluation reads every update, applied in order, and every replica ends with one
  // device's running statistics over the global batch (25, 25 and 10 rows).
  for (int n : {2, 3}) {
    strata::MirroredStrategy mirrored(n);
    CHECK(equivalence::per_replica_norms_difference(mirrored) < 1e-5);
    strata::CentralStorageStrategy central(n);
    CHECK(equivalence::per_replica_norms_difference(central) < 1e-5);
  }
}

TEST_CASE("Strategy.BatchNormPerReplica: run(fn) without a batch, and a step that throws") {
  // A step that takes its own rows (run(fn): replica r the rows r * 5 .. r * 5 + 4) combines
  // the norms' statistics as a distributed batch's step does.
  strata::Generator g(4);
  const Tensor x = strata::add(strata::uniform({10, 6}, -1, 1, g), strata::full({10, 6}, 0.5));
  equivalence::TwoNorms ref;
  (void)ref(x);
  const auto same_as_ref = [&](auto& net) {
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t k = 0; k < ref.buffers().size(); ++k)
        CHECK(equivalence::max_relative_difference({net.replica(r).buffers()[k].template to_vector<float>()},
                                                   {ref.buffers()[k].to_vector<float>()}) < 1e-6);
  };
  const auto own_rows = [&](strata::ReplicaContext& ctx) {
    const std::int64_t r = ctx.replica_id_in_sync_group();
    return strata::slice(x, 0, 5 * r, 5 * r + 5);
  };
  {
    strata::MirroredStrategy strategy(2);
    auto net = strategy.scope([] { return equivalence::TwoNorms(); });
    strategy.run([&](strata::ReplicaContext& ctx) {
      strata::nn::Module& local = net;
      (void)local(own_rows(ctx));
    });
    same_as_ref(net);
  }
  // Replica 1 throws after its norms queued their sums; replica 0, waiting at the step's end
  // to sum them, is released and the replica's own error reaches the caller. Nothing queued
  // stays behind on any thread: a new strategy's step ends where one device's does.
  {
    strata::MirroredStrategy strategy(2);
    auto net = strategy.scope([] { return equivalence::TwoNorms(); });
    CHECK_THROWS_WITH(strategy.run([&](strata::ReplicaContext& ctx) {
      strata::nn::Module& local = net;
      (void)local(own_rows(ctx));
      if (ctx.replica_id_in_sync_group() == 1) throw std::runtime_error("replica 1 broke");
    }), "replica 1 broke");
  }
  strata::MirroredStrategy strategy(2);
  auto net = strategy.scope([] { return equivalence::TwoNorms(); });
  strategy.run([&](strata::ReplicaContext& ctx) {
    strata::nn::Module& local = net;
    (void)local(own_rows(ctx));
  });
  same_as_ref(net);
}

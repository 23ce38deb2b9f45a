// MirroredStrategy: N replica threads on global batch B end where OneDeviceStrategy ends on
// batch B (the equivalence property), with gradient accumulation, sharded gradients and rows
// by measured speed too; the replicas' copies stay identical; reduce and all-reduce; non-finite
// gradients skipped together; the input's threads; misuse is named.
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

static_assert(strata::Strategy<strata::MirroredStrategy<>>);

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

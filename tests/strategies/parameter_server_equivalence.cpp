// ParameterServerStrategy<Mpi> under mpirun (or <Gloo> under strata-run): in Sync mode, with the update on the servers or
// on the workers, with gradient accumulation, for the MLP and a CNN, every rank (servers
// included) ends where OneDeviceStrategy ends on the same global batch — which is where
// MultiWorkerMirroredStrategy ends (multi_worker_equivalence). In Async mode every push is
// applied exactly once: each partition's server counts as many updates as the workers ran steps.
//   parameter_server_equivalence mpi|gloo SERVERS   exit status 0: every check held on this rank
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <thread>
#include <chrono>

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#include <strata/strategy/parameter_server.hpp>

#include "strategies/equivalence.hpp"
#include "strategies/zero_rows.hpp"

// Each transport of the build carries the strategy (parameter_server/transport.hpp), and a
// collective without one does not.
#if STRATA_HAS_MPI
static_assert(strata::ps::TransportOf<strata::collective::Mpi>);
static_assert(!strata::ps::AdmitsWorkers<strata::ps::Transport<strata::collective::Mpi>>);  // an MPI job's ranks are fixed
static_assert(strata::Strategy<strata::ParameterServerStrategy<strata::collective::Mpi, strata::ps::Sync>>);
static_assert(strata::Strategy<strata::ParameterServerStrategy<strata::collective::Mpi, strata::ps::Async>>);
// Sync checkpoints carry the servers' shards (checkpointing.hpp).
using MpiSyncStrategy = strata::ParameterServerStrategy<strata::collective::Mpi, strata::ps::Sync>;
static_assert(strata::detail::ShardedCheckpoints<MpiSyncStrategy> && strata::detail::SharesChiefTensors<MpiSyncStrategy>);
#endif
#if STRATA_HAS_GLOO
static_assert(strata::ps::TransportOf<strata::collective::Gloo>);
static_assert(strata::ps::AdmitsWorkers<strata::ps::Transport<strata::collective::Gloo>>);
static_assert(strata::Strategy<strata::ParameterServerStrategy<strata::collective::Gloo, strata::ps::Sync>>);
#endif
static_assert(!strata::ps::TransportOf<strata::collective::InProcess>);

namespace {

template <class C>
int check_sync(int servers) {
  int failures = 0;
  for (bool on_servers : {true, false})
    for (bool conv : {false, true})
      for (int k : {1, 2}) {
        equivalence::Setup s;
        s.conv = conv;
        s.accumulation = k;
        std::vector<double> ref_losses, losses;
        const auto ref = equivalence::one_device_reference(s, &ref_losses);
        // 2 KiB partitions: the 32x32 and conv-to-dense weights are split over the servers.
        strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .update_on_servers = on_servers, .partition_bytes = 2048});
        const auto got = equivalence::train_steps(strategy, s, &losses);
        const double diff = equivalence::max_relative_difference(got, ref);
        double loss_diff = 0;
        if (!strategy.is_server()) {
          loss_diff = losses.size() == ref_losses.size() ? 0.0 : 1.0;
          for (std::size_t i = 0; i < std::min(losses.size(), ref_losses.size()); ++i)
            loss_diff = std::max(loss_diff, std::fabs(losses[i] - ref_losses[i]) / std::fabs(ref_losses[i]));
        }
        const bool ok = diff < 1e-5 && loss_diff < 1e-5;
        failures += ok ? 0 : 1;
        std::printf("%s rank %d (%s of %d servers, %d workers): sync, update on %s, %s k=%d: parameters differ by "
                    "%.3g (relative), losses by %.3g over %zu steps\n",
                    ok ? "ok  " : "FAIL", strategy.rank(), strategy.is_server() ? "server" : "worker",
                    strategy.num_servers(), strategy.num_workers(), on_servers ? "servers" : "workers",
                    conv ? "cnn" : "mlp", k, diff, loss_diff, losses.size());
      }
  // The user's losses: MSE and a label-smoothed cross-entropy (compute_average_loss), on a
  // global batch of 25 (uneven over the workers).
  for (auto loss : {equivalence::Loss::mse, equivalence::Loss::smoothed_cross_entropy}) {
    const equivalence::Setup s = equivalence::user_loss_setup(loss);
    const auto ref = equivalence::one_device_reference(s);
    // Clipping runs on the workers, before the update: the workers update (update_on_servers = false).
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy(
        {.servers = servers, .update_on_servers = s.clip_norm == 0, .partition_bytes = 2048});
    const double diff = equivalence::train_difference(strategy, s, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: sync, %s, global batch 25: parameters differ by %.3g (relative)\n", ok ? "ok  " : "FAIL",
                strategy.rank(), equivalence::user_loss_name(loss), diff);
  }
  // A table with row-sparse gradients, cut by rows over the servers: each worker pushes the
  // rows it touched; the lazy rule or the dense one, on the servers or on the workers; a
  // global batch of 25. Every worker pushes fewer bytes than the model, every step.
  for (auto rule : {strata::optim::SparseUpdates::lazy, strata::optim::SparseUpdates::dense})
    for (auto [on_servers, remote] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
      equivalence::Setup s;
      s.table = true;
      s.global_batch = 25;
      s.sparse_updates = rule;
      strata::OneDeviceStrategy one;
      const auto ref = equivalence::train_steps(one, s);
      const bool lazy = rule == strata::optim::SparseUpdates::lazy;
      strata::ParameterServerStrategy<C, strata::ps::Sync> strategy(
          {.servers = servers, .update_on_servers = on_servers, .partition_bytes = 2048, .remote_tables = remote});
      const auto got = equivalence::train_steps(strategy, s);
      // A server's copy of the table (variable 0: TableFeatures comes first) keeps its own
      // rows, the rest zeros (update on the servers), or is never read (on the workers).
      auto want = ref;
      const strata::ps::Shards& shards = strategy.shards();
      const bool table_first = shards.partitions[shards.of_variable[0].front()].row_width > 0;
      if (strategy.is_server() && !on_servers) want[0] = got[0];
      if (strategy.is_server() && on_servers)
        for (std::size_t id : shards.of_variable[0])
          if (const auto& q = shards.partitions[id]; q.server != strategy.transport().roles().index_of(strategy.rank()))
            std::fill_n(want[0].begin() + q.offset, q.count, 0.0f);
      const double diff = table_first ? equivalence::max_relative_difference(got, want) : 1.0;
      double model_bytes = 0;
      for (const auto& v : got) model_bytes += 4.0 * static_cast<double>(v.size());
      const strata::ps::TransferStats moved = strategy.transfer_stats();
      const bool counted = strategy.is_server() ? moved.steps == 0 && moved.pushed_bytes == 0
                                                : moved.steps > 0 && moved.pushed_bytes < moved.steps * model_bytes;
      const bool ok = diff < 1e-5 && counted;
      failures += ok ? 0 : 1;
      std::printf("%s rank %d: sync, row-sparse table%s, %s rule, update on %s: parameters differ by %.3g (relative); "
                  "%lld steps, %.0f bytes pushed and %.0f pulled (the model: %.0f a step)\n",
                  ok ? "ok  " : "FAIL", strategy.rank(), remote ? " on the servers only" : "", lazy ? "lazy" : "dense",
                  on_servers ? "servers" : "workers", diff, static_cast<long long>(moved.steps), moved.pushed_bytes, moved.pulled_bytes, model_bytes);
    }
  // Weights for inference from the chief, after training with the variables on the servers
  // (split over them): a fresh one-device model loaded from the file holds what every rank
  // holds, bit for bit, and what one device trained.
  {
    equivalence::Setup s;
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_steps(one, s);
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    const auto path = std::filesystem::temp_directory_path() /
                      ("strata_ps_weights_" + std::to_string(servers) + "_" + std::to_string(strategy.num_workers()) + ".weights");
    const auto [held_diff, loaded_diff] = equivalence::saved_weights_difference(strategy, s, ref, path);
    const bool ok = held_diff == 0 && loaded_diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: save_weights from the chief, loaded into a one-device model: %.3g from this rank's "
                "parameters, %.3g from one device's (relative)\n",
                ok ? "ok  " : "FAIL", strategy.rank(), held_diff, loaded_diff);
  }
  // A model with Dropout: each example draws the mask it draws on one device.
  {
    equivalence::Setup s;
    s.dropout = true;
    s.global_batch = 25;
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_steps(one, s);
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    const double diff = equivalence::train_difference(strategy, s, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: sync, dropout: parameters differ by %.3g (relative)\n", ok ? "ok  " : "FAIL",
                strategy.rank(), diff);
  }
  // An epoch whose last batch leaves workers without rows: the reference models end where one
  // device ends (their zero gradients, not the last step's, pushed to the servers).
  {
    std::unique_ptr<strata::ParameterServerStrategy<C, strata::ps::Sync>> current;
    const auto fresh = [&]() -> auto& {
      current.reset();  // (one strategy at a time)
      current = std::make_unique<strata::ParameterServerStrategy<C, strata::ps::Sync>>(
          strata::ParameterServerOptions{.servers = servers, .partition_bytes = 2048});
      return *current;
    };
    failures += zero_rows::check_models("sync, " + std::to_string(servers) + " servers", fresh);
    // The same with the workers under the bfloat16 policy.
    failures += zero_rows::check_models("sync, " + std::to_string(servers) + " servers", fresh, zero_rows::kBf16Models,
                                        strata::precision::bfloat16);
    // float16 with the loss scale, the last worker's loss infinite in the second step: the
    // workers agree to skip the push (the servers update) and halve their scales together.
    const int workers = fresh().num_workers();
    failures += zero_rows::check_models("sync, " + std::to_string(servers) + " servers", fresh, zero_rows::kBf16Models,
                                        strata::precision::float16, {.replica = workers - 1, .step = 1});
  }
  // SyncBatchNorm: statistics over the global batch of the workers, so they train as one
  // device does. Its running statistics are the workers' state (the servers hold the
  // variables only): compared on the workers, the parameters on every rank.
  {
    equivalence::Setup s;
    s.sync_batch_norm = true;
    s.conv = true;
    s.global_batch = 25;
    s.examples = 20 * 25 + 10;
    strata::OneDeviceStrategy one;
    auto ref = equivalence::train_steps(one, s);
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    auto got = equivalence::train_steps(strategy, s);
    if (strategy.is_server()) {  // the parameters alone
      const std::size_t params = got.size() - 3;
      got.resize(params);
      ref.resize(params);
    }
    const double diff = equivalence::max_relative_difference(got, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: sync, SyncBatchNorm: parameters%s differ by %.3g (relative)\n", ok ? "ok  " : "FAIL",
                strategy.rank(), strategy.is_server() ? "" : " and running statistics", diff);
  }
  // A dataset of three inputs and no labels, for a model of two (global batch 25, uneven).
  {
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_two_inputs(one, 25);
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    const double diff = equivalence::max_relative_difference(equivalence::train_two_inputs(strategy, 25), ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: sync, several inputs, no labels: parameters differ by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", strategy.rank(), diff);
  }
  // Each worker shards and batches its input itself (distribute(fn), InputContext): a global
  // batch of 24, unshuffled, is one device's batch; the workers whose shards end first join.
  {
    equivalence::Setup plain;
    plain.shuffle = false;
    plain.global_batch = 24;
    equivalence::Setup own = plain;
    own.per_worker_input = true;
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_steps(one, plain);
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    const double diff = equivalence::train_difference(strategy, own, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: sync, per-worker input function: parameters differ by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", strategy.rank(), diff);
  }
  // Distributed evaluation: the workers' counts, exactly those of one pass, on every rank.
  {
    strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .partition_bytes = 2048});
    const std::string who = "rank " + std::to_string(strategy.rank()) + (strategy.is_server() ? " (server)" : " (worker)");
    failures += equivalence::check_evaluation(strategy, who.c_str());
    // A loss reduced as a local mean inside a worker's run(): an error naming the fix.
    if (!strategy.is_server()) {
      const std::string e = equivalence::local_mean_error(strategy);
      const bool ok = e.find("Reduction::mean inside Strategy::run with " + std::to_string(strategy.num_workers()) +
                             " replicas in sync") != std::string::npos;
      failures += ok ? 0 : 1;
      std::printf("%s %s: local mean inside run: %s\n", ok ? "ok  " : "FAIL", who.c_str(), e.c_str());
    }
  }
  return failures;
}

// Async: every worker's steps, summed, is every partition's update count on its server.
template <class C>
int check_async(int servers, std::int64_t staleness) {
  equivalence::Setup s;
  strata::ParameterServerStrategy<C, strata::ps::Async> strategy({.servers = servers, .staleness = staleness, .partition_bytes = 2048});
  std::vector<double> losses;
  const auto got = equivalence::train_steps(strategy, s, &losses);
  strata::PerReplica<double> steps(1);
  steps[0] = static_cast<double>(losses.size());
  // The workers' total steps, through the job-wide collective (servers contribute 0).
  double total = strategy.is_server() ? 0 : steps[0];
  strategy.transport().world().allreduce_raw(&total, &total, 1, strata::DType::f64, strata::ReduceOp::Sum);
  int failures = 0;
  std::string counts;
  for (std::size_t id = 0; id < strategy.shards().partitions.size(); ++id) {
    if (!strategy.is_server() || strategy.shards().partitions[id].server != strategy.transport().roles().index_of(strategy.rank()))
      continue;
    const std::int64_t n = strategy.server_updates(id);
    counts += " " + std::to_string(n);
    failures += n == static_cast<std::int64_t>(total) ? 0 : 1;
  }
  bool finite = true;
  for (const auto& p : got)
    for (float v : p) finite = finite && std::isfinite(v);
  failures += finite ? 0 : 1;
  // Every worker's steps: its share of the examples, ceil(share / batch).
  const std::int64_t want = (s.examples / strategy.num_workers() + s.global_batch - 1) / s.global_batch;
  if (!strategy.is_server()) failures += std::llabs(static_cast<long long>(losses.size()) - want) <= 1 ? 0 : 1;
  std::printf("%s rank %d (%s): async, staleness %lld: %zu steps here, %.0f in all; updates per held partition:%s\n",
              failures == 0 ? "ok  " : "FAIL", strategy.rank(), strategy.is_server() ? "server" : "worker",
              static_cast<long long>(staleness), losses.size(), total, counts.empty() ? " (none held)" : counts.c_str());
  return failures;
}

// Async under float16 with the loss scale: the first worker's loss is infinite in its second
// step. That worker alone skips the step (no push) and halves its scale; the others' steps go
// on as they come, every step pushed is one update of every partition, nothing hangs and
// everything stays finite.
template <class C>
int check_async_loss_scale(int servers) {
  const strata::precision::Scope fp16(strata::precision::float16);
  strata::ParameterServerStrategy<C, strata::ps::Async> strategy({.servers = servers, .partition_bytes = 2048});
  const int worker = strategy.is_server() ? -1 : strategy.transport().roles().index_of(strategy.rank());
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return zero_rows::make(zero_rows::Model::cnn); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.05, {.momentum = 0.9}); });
  opt.set_loss_scale();
  std::int64_t steps = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(zero_rows::dataset(zero_rows::Model::cnn)).batch(2)))
    strategy.run(
        [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          const strata::Tensor loss = zero_rows::poisoned(
              zero_rows::replica_loss(zero_rows::Model::cnn, net, b.x, b.y, b.global_size), worker == 0 && steps == 1);
          opt.apply_gradients(ctx, strata::grad(opt.scale_loss(loss), net.parameters()));
          ++steps;
        },
        batch);
  int failures = 0;
  const bool poisoned = worker == 0;
  double applied = strategy.is_server() ? 0 : static_cast<double>(opt.steps());
  strategy.transport().world().allreduce_raw(&applied, &applied, 1, strata::DType::f64, strata::ReduceOp::Sum);
  if (!strategy.is_server()) {
    const bool ok = opt.skipped_steps() == (poisoned ? 1 : 0) && opt.steps() == steps - opt.skipped_steps() &&
                    opt.loss_scale()->scale() == (poisoned ? 32768.0 : 65536.0);
    failures += ok ? 0 : 1;
  }
  for (std::size_t id = 0; id < strategy.shards().partitions.size(); ++id)
    if (strategy.is_server() && strategy.shards().partitions[id].server == strategy.transport().roles().index_of(strategy.rank()))
      failures += strategy.server_updates(id) == static_cast<std::int64_t>(applied) ? 0 : 1;
  bool finite = true;
  for (const strata::Tensor& p : static_cast<strata::nn::Module&>(net).parameters())
    for (float v : p.to_vector<float>()) finite = finite && std::isfinite(v);
  failures += finite ? 0 : 1;
  std::printf("%s rank %d (%s): async in fp16, worker 0's second loss infinite: %lld steps here, %lld skipped, scale "
              "%g; %.0f updates applied in all\n",
              failures == 0 ? "ok  " : "FAIL", strategy.rank(), strategy.is_server() ? "server" : "worker",
              static_cast<long long>(steps), static_cast<long long>(strategy.is_server() ? 0 : opt.skipped_steps()),
              strategy.is_server() ? 0.0 : opt.loss_scale()->scale(), applied);
  return failures;
}

// Async with a row-sparse table (200 rows x 4, cut by rows over the servers) under a loss
// linear in it (the looked-up rows' sum / 8: a gradient that does not depend on the values), a
// zero start and SGD at lr 1, so every order of the pushes ends at the same exact values:
// each row at -(its lookups over the whole epoch) / 8, where every push was applied once.
// After its last step a worker holds the rows as of its last replies (the rows dirty for it):
// each row at -m / 8 with m between its own lookups and all of them, and for every row some
// worker (the last its server answered) already holds the final value. By rows (the lazy rule
// or the dense one) and by the dense protocol (sparse_tables = false).
template <class C>
int check_async_table(int servers, std::int64_t staleness) {
  constexpr std::int64_t kRows = 200, kWidth = 4, kLookups = 6, kExamples = 90, kBatch = 8;
  const auto row_of = [](std::int64_t i, std::int64_t j) { return (i * 7 + j * 13) % 60 + (j == 5 ? 100 : 0); };
  int failures = 0;
  struct Case {
    bool by_rows;
    strata::optim::SparseUpdates rule;
    bool remote;
  };
  for (auto [by_rows, rule, remote] : {Case{true, strata::optim::SparseUpdates::lazy, false},
                                       Case{true, strata::optim::SparseUpdates::dense, false},
                                       Case{false, strata::optim::SparseUpdates::dense, false},
                                       Case{true, strata::optim::SparseUpdates::lazy, true}}) {
    strata::ParameterServerStrategy<C, strata::ps::Async> strategy(
        {.servers = servers, .staleness = staleness, .sparse_tables = by_rows, .remote_tables = remote});
    strata::nn::Embedding table = strategy.scope([&] {
      strata::nn::Embedding e(kRows, kWidth, strata::TableGradient::row_sparse);
      strata::NoGradGuard no_grad;
      strata::Tensor w = e.weight();  // a handle: fills the table's own values
      w.fill_(0.0);
      return e;
    });
    strata::optim::Sgd opt = strategy.scope([&] { return strata::optim::Sgd(table.parameters(), 1.0); });
    opt.set_sparse_updates(rule);
    std::vector<float> xs(kExamples);
    for (std::int64_t i = 0; i < kExamples; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
    strata::data::TensorDataset examples(strata::from_vector<float>({kExamples, 1}, xs),
                                         strata::from_vector<std::int64_t>({kExamples}, std::vector<std::int64_t>(kExamples, 0)));
    std::vector<std::int64_t> own(kRows, 0), all(kRows, 0);
    for (std::int64_t i = 0; i < kExamples; ++i)
      for (std::int64_t j = 0; j < kLookups; ++j) ++all[static_cast<std::size_t>(row_of(i, j))];
    std::vector<float> last;
    for (auto& batch : strategy.distribute(strata::data::Pipeline(examples).batch(kBatch))) {
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        const strata::Tensor x = b.x.contiguous();
        std::vector<std::int64_t> idx;
        for (std::int64_t n = 0; n < x.dim(0); ++n) {
          const auto i = static_cast<std::int64_t>(x.data<float>()[n]);
          for (std::int64_t j = 0; j < kLookups; ++j) {
            idx.push_back(row_of(i, j));
            ++own[static_cast<std::size_t>(row_of(i, j))];
          }
        }
        const strata::Tensor loss = strata::sum(table(strata::from_vector<std::int64_t>({x.dim(0), kLookups}, idx))) * 0.125;
        opt.apply_gradients(ctx, strata::grad(loss, table.parameters()));
      }, batch);
      last = table.weight().to_vector<float>();
    }
    const std::vector<float> final_values = table.weight().to_vector<float>();
    // Every worker's copy after its last step, gathered (a server's: zeros, left out).
    auto& world = strategy.transport().world();
    std::vector<double> mine(static_cast<std::size_t>(kRows * kWidth), 0.0);
    if (!strategy.is_server()) std::copy(last.begin(), last.end(), mine.begin());
    std::vector<double> every(mine.size() * static_cast<std::size_t>(world.size()));
    world.allgather_raw(mine.data(), every.data(), mine.size(), strata::DType::f64);
    int wrong_final = 0, wrong_copy = 0, unseen = 0;
    for (std::int64_t r = 0; r < kRows; ++r) {
      const double want = -0.125 * static_cast<double>(all[static_cast<std::size_t>(r)]);
      bool someone = false;
      for (int w : strategy.transport().roles().workers) {
        bool row_final = true;
        for (std::int64_t c = 0; c < kWidth; ++c)
          row_final = row_final && every[static_cast<std::size_t>(w) * mine.size() + static_cast<std::size_t>(r * kWidth + c)] == want;
        someone = someone || row_final;
      }
      unseen += someone || remote ? 0 : 1;  // (remote: a worker's copy is not the table inside an epoch)
      if (strategy.is_server()) continue;
      for (std::int64_t c = 0; c < kWidth; ++c) {
        const auto e = static_cast<std::size_t>(r * kWidth + c);
        wrong_final += final_values[e] == want ? 0 : 1;
        if (remote) continue;
        const double m = -8.0 * last[e];
        wrong_copy += m == std::floor(m) && m >= static_cast<double>(own[static_cast<std::size_t>(r)]) &&
                              m <= static_cast<double>(all[static_cast<std::size_t>(r)])
                          ? 0
                          : 1;
      }
    }
    const strata::ps::TransferStats moved = strategy.transfer_stats();
    const bool small = strategy.is_server() || !by_rows || moved.pushed_bytes < moved.steps * 4.0 * kRows * kWidth;
    const bool ok = wrong_final == 0 && wrong_copy == 0 && unseen == 0 && small;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: async, staleness %lld, row-sparse table %s%s%s: %d final values and %d copies wrong, %d "
                "rows final on no worker; %lld steps, %.0f bytes pushed\n",
                ok ? "ok  " : "FAIL", strategy.rank(), static_cast<long long>(staleness),
                by_rows ? "by rows, " : "whole (sparse_tables = false)",
                by_rows ? (rule == strata::optim::SparseUpdates::lazy ? "lazy rule" : "dense rule") : "",
                remote ? ", on the servers only" : "", wrong_final,
                wrong_copy, unseen, static_cast<long long>(moved.steps), moved.pushed_bytes);
  }
  return failures;
}

// The staleness bound, observed: worker 1 sleeps 20 ms before each push (the others do not). Bound 0: worker 0's
// step k completes only after worker 1 pushed its step k. No bound: worker 0 finishes all its
// steps before worker 1 starts its last (it never waits for it).
template <class C>
int check_staleness(int servers, std::int64_t staleness) {
  using Clock = std::chrono::steady_clock;
  equivalence::Setup s;
  strata::ParameterServerStrategy<C, strata::ps::Async> strategy({.servers = servers, .staleness = staleness, .partition_bytes = 2048});
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  const int w = strategy.is_server() ? -1 : strategy.transport().roles().index_of(strategy.rank());
  std::vector<double> pushed, done;  // per step, seconds since the epoch of steady_clock
  auto now = [] { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); };
  for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(s.global_batch))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      auto grads = strata::grad(loss, net.parameters());
      if (w == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      pushed.push_back(now());
      opt.apply_gradients(ctx, grads);
      done.push_back(now());
    }, batch);
  }
  // Every rank's (pushed, done) pairs of the steps every worker runs (the last worker's
  // shard is the smallest), gathered over the whole job.
  const auto steps = static_cast<std::size_t>(strata::data::Pipeline(equivalence::dataset(s))
                                                  .shard(strategy.num_workers(), strategy.num_workers() - 1)
                                                  .batch(s.global_batch)
                                                  .num_batches());
  std::vector<double> mine(2 * steps, 0.0);
  for (std::size_t k = 0; k < std::min(steps, pushed.size()); ++k) {
    mine[k] = pushed[k];
    mine[steps + k] = done[k];
  }
  auto& world = strategy.transport().world();
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.allgather_raw(mine.data(), all.data(), mine.size(), strata::DType::f64);
  const auto& workers = strategy.transport().roles().workers;
  const double* fast = all.data() + 2 * steps * static_cast<std::size_t>(workers[0]);
  const double* slow = all.data() + 2 * steps * static_cast<std::size_t>(workers[1]);
  bool ok = true;
  std::string detail;
  if (staleness == 0) {
    for (std::size_t k = 0; k < steps; ++k) ok = ok && fast[steps + k] >= slow[k];
    detail = "worker 0's steps each end after worker 1's push of the same step";
  } else {
    ok = fast[2 * steps - 1] < slow[steps - 1];
    detail = "worker 0 ended its last step " + std::to_string(1e3 * (slow[steps - 1] - fast[2 * steps - 1])) +
             " ms before worker 1's last push";
  }
  std::printf("%s rank %d: async, staleness %lld: %s\n", ok ? "ok  " : "FAIL", strategy.rank(),
              static_cast<long long>(staleness), detail.c_str());
  return ok ? 0 : 1;
}

// Sync gather: worker w returns w + 1 rows of the value w at the first step; every worker
// gets them all, in worker order.
template <class C>
int check_gather(int servers) {
  equivalence::Setup s;
  strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers});
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2); });
  int failures = 0;
  bool first = true;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(s.global_batch))) {
    auto rows = strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      opt.apply_gradients(ctx, strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size), net.parameters()));
      const int w = ctx.replica_id_in_sync_group();
      return strata::full(strata::Shape{w + 1, 2}, static_cast<double>(w), strata::DType::f64);
    }, batch);
    if (!std::exchange(first, false)) continue;
    const std::vector<double> got = strategy.gather(rows).template to_vector<double>();
    std::vector<double> want;
    for (int w = 0; w < strategy.num_workers(); ++w) want.insert(want.end(), static_cast<std::size_t>(2 * (w + 1)), w);
    failures += got == want ? 0 : 1;
    std::printf("%s rank %d: sync gather of %d workers' rows: %zu values\n", got == want ? "ok  " : "FAIL",
                strategy.rank(), strategy.num_workers(), got.size());
  }
  return failures;
}

// A table that lives on the servers only (remote_tables), Sync, two epochs: 300 rows x 4
// starting at row r = r + c / 4, SGD at lr 1 on a loss linear in the looked-up rows (their sum
// / 8), a global batch of 25 unshuffled. Inside an epoch a worker's copy of the table reads
// zeros (its memory is given back), yet every lookup reads the servers' values after the last
// step: row r at its start minus (its lookups by all workers in the steps before) / 8, exact.
// After each epoch the worker's copy holds the servers' values.
template <class C>
int check_remote_lookups(int servers) {
  constexpr std::int64_t kRows = 300, kWidth = 4, kLookups = 6, kExamples = 90, kBatch = 25;
  const auto row_of = [](std::int64_t i, std::int64_t j) { return (i * 7 + j * 13) % 290; };
  const auto start = [](std::int64_t r, std::int64_t c) { return static_cast<double>(r) + 0.25 * static_cast<double>(c); };
  strata::ParameterServerStrategy<C, strata::ps::Sync> strategy({.servers = servers, .remote_tables = true});
  strata::nn::Embedding table = strategy.scope([&] {
    strata::nn::Embedding e(kRows, kWidth, strata::TableGradient::row_sparse);
    strata::NoGradGuard no_grad;
    strata::Tensor w = e.weight();
    for (std::int64_t r = 0; r < kRows; ++r)
      for (std::int64_t c = 0; c < kWidth; ++c) w.data<float>()[r * kWidth + c] = static_cast<float>(start(r, c));
    return e;
  });
  strata::optim::Sgd opt = strategy.scope([&] { return strata::optim::Sgd(table.parameters(), 1.0); });
  std::vector<float> xs(kExamples);
  for (std::int64_t i = 0; i < kExamples; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
  strata::data::TensorDataset examples(strata::from_vector<float>({kExamples, 1}, xs),
                                       strata::from_vector<std::int64_t>({kExamples}, std::vector<std::int64_t>(kExamples, 0)));
  std::vector<std::int64_t> seen(kRows, 0);  // lookups by every worker in the steps so far
  std::int64_t wrong_lookups = 0, held_values = 0, wrong_after = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::int64_t step = 0;  // of this epoch
    for (auto& batch : strategy.distribute(strata::data::Pipeline(examples).batch(kBatch))) {
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        for (float v : table.weight().to_vector<float>()) held_values += v != 0.0f ? 1 : 0;
        const strata::Tensor x = b.x.contiguous();
        std::vector<std::int64_t> idx;
        for (std::int64_t n = 0; n < x.dim(0); ++n)
          for (std::int64_t j = 0; j < kLookups; ++j) idx.push_back(row_of(static_cast<std::int64_t>(x.data<float>()[n]), j));
        const strata::Tensor rows = table(strata::from_vector<std::int64_t>({x.dim(0), kLookups}, idx));
        const std::vector<float> got = rows.to_vector<float>();
        for (std::size_t k = 0; k < idx.size(); ++k)
          for (std::int64_t c = 0; c < kWidth; ++c)
            wrong_lookups += got[k * kWidth + static_cast<std::size_t>(c)] ==
                                     start(idx[k], c) - 0.125 * static_cast<double>(seen[static_cast<std::size_t>(idx[k])])
                                 ? 0
                                 : 1;
        opt.apply_gradients(ctx, strata::grad(strata::sum(rows) * 0.125, table.parameters()));
      }, batch);
      for (std::int64_t i = step * kBatch; i < std::min((step + 1) * kBatch, kExamples); ++i)
        for (std::int64_t j = 0; j < kLookups; ++j) ++seen[static_cast<std::size_t>(row_of(i, j))];
      ++step;
    }
    if (strategy.is_server()) continue;  // (the loop's body runs on the workers)
    const std::vector<float> after = table.weight().to_vector<float>();
    for (std::int64_t r = 0; r < kRows; ++r)
      for (std::int64_t c = 0; c < kWidth; ++c)
        wrong_after += after[static_cast<std::size_t>(r * kWidth + c)] ==
                               start(r, c) - 0.125 * static_cast<double>(seen[static_cast<std::size_t>(r)])
                           ? 0
                           : 1;
  }
  const strata::ps::TransferStats moved = strategy.transfer_stats();
  const double table_bytes = 4.0 * kRows * kWidth;
  const bool small = strategy.is_server() || (moved.looked_up_bytes > 0 && moved.pulled_bytes < moved.steps * table_bytes);
  const bool ok = wrong_lookups == 0 && held_values == 0 && wrong_after == 0 && small;
  std::printf("%s rank %d: sync, a table on the servers only, 2 epochs: %lld lookups and %lld values after the epochs "
              "wrong, %lld values held inside the epochs; %lld steps, %.0f bytes pulled (the table: %.0f)\n",
              ok ? "ok  " : "FAIL", strategy.rank(), static_cast<long long>(wrong_lookups),
              static_cast<long long>(wrong_after), static_cast<long long>(held_values),
              static_cast<long long>(moved.steps), moved.pulled_bytes, table_bytes);
  return ok ? 0 : 1;
}

}  // namespace

// Async with dispatched batches (ps::Dispatcher): the first server hands each batch of the
// epoch to one worker; the last worker sleeps 20 ms per step, so the others take more. Every
// batch trained once in all (each worker's batch numbers, gathered: a permutation of the
// epoch's), each partition updated once per step, and the slow worker's share below the
// others' mean (one of them may lose its core for a while on a host with fewer cores than
// processes, and then take no more than the slow one: 13 and 13 of 42 were seen at 5 ms).
template <class C>
int check_async_dispatched(int servers) {
  equivalence::Setup s;
  strata::ParameterServerStrategy<C, strata::ps::Async> strategy(
      {.servers = servers, .partition_bytes = 2048, .dispatch_batches = true});
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  const auto pipeline = strata::data::Pipeline(equivalence::dataset(s)).shuffle(5).batch(s.global_batch);
  const std::int64_t batches = pipeline.num_batches();
  const int w = strategy.is_server() ? -1 : strategy.transport().roles().index_of(strategy.rank());
  const bool slow = w == strategy.num_workers() - 1 && strategy.num_workers() > 1;
  std::vector<double> mine(static_cast<std::size_t>(batches), 0.0);  // 1 where this worker trained batch k
  std::int64_t steps = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::fill(mine.begin(), mine.end(), 0.0);
    for (auto& batch : strategy.distribute(pipeline)) {
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        mine[static_cast<std::size_t>(b.index)] += 1;
        if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
        opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
      }, batch);
      ++steps;
    }
  }
  // The last epoch's batches per worker, over the whole job (servers add zeros).
  std::vector<double> all(mine);
  auto& world = strategy.transport().world();
  world.allreduce_raw(all.data(), all.data(), all.size(), strata::DType::f64, strata::ReduceOp::Sum);
  int failures = 0;
  for (double n : all) failures += n == 1.0 ? 0 : 1;
  double total = strategy.is_server() ? 0 : static_cast<double>(steps), slow_steps = slow ? static_cast<double>(steps) : 0;
  world.allreduce_raw(&total, &total, 1, strata::DType::f64, strata::ReduceOp::Sum);
  world.allreduce_raw(&slow_steps, &slow_steps, 1, strata::DType::f64, strata::ReduceOp::Sum);
  failures += total == static_cast<double>(2 * batches) ? 0 : 1;
  if (strategy.num_workers() > 1 && !strategy.is_server())
    failures += slow_steps < (total - slow_steps) / (strategy.num_workers() - 1) ? 0 : 1;
  for (std::size_t id = 0; id < strategy.shards().partitions.size(); ++id)
    if (strategy.is_server() && strategy.shards().partitions[id].server == strategy.transport().roles().index_of(strategy.rank()))
      failures += strategy.server_updates(id) == 2 * batches ? 0 : 1;
  const auto st = strategy.dispatch_stats();
  if (strategy.rank() == strategy.transport().roles().servers.front())
    failures += st.batches == batches && st.completed == batches && st.repeated == 0 && st.redispatched == 0 ? 0 : 1;
  std::printf("%s rank %d (%s): async, dispatched: %lld steps here of %.0f (the slow worker %.0f), %lld batches an epoch\n",
              failures == 0 ? "ok  " : "FAIL", strategy.rank(), strategy.is_server() ? "server" : "worker",
              static_cast<long long>(steps), total, slow_steps, static_cast<long long>(batches));
  return failures;
}

template <class C>
int check_all(int servers) {
  return check_sync<C>(servers) + check_gather<C>(servers) + check_async<C>(servers, -1) +
         check_async<C>(servers, 0) + check_async_table<C>(servers, -1) + check_async_table<C>(servers, 0) +
         check_staleness<C>(servers, 0) + check_staleness<C>(servers, -1) + check_async_dispatched<C>(servers) +
         check_remote_lookups<C>(servers) + check_async_loss_scale<C>(servers);
}

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  const int servers = argc > 2 ? std::atoi(argv[2]) : 1;
  try {
#if STRATA_HAS_MPI
    if (which == "mpi") return check_all<strata::collective::Mpi>(servers) == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return check_all<strata::collective::Gloo>(servers) == 0 ? 0 : 1;
#endif
    std::printf("usage: parameter_server_equivalence mpi|gloo SERVERS\n");
    return 2;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}

// ShardedStrategy<C, Stage> across processes ends where OneDeviceStrategy ends on the same
// global batch (each process computes that reference itself), for both stages available: the
// MLP with Dropout, Adam, clipping by the global norm and a cosine schedule, on a global batch
// of 25 (uneven over 2, 3 and 4 processes); the CNN; gradient accumulation. Each rank holds
// the optimizer state of its shard alone; misuse is a clear error. Run under mpirun (C = Mpi)
// or strata-run (Gloo).
//   sharded_equivalence mpi|gloo                  exit status 0: every check held on this rank
//   sharded_equivalence mpi|gloo outside_scope    fails, naming strategy.scope (an optimizer made outside it)
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>

#include "strategies/equivalence.hpp"
#include "strategies/zero_rows.hpp"

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

#if STRATA_HAS_MPI
static_assert(strata::Strategy<strata::ShardedStrategy<strata::collective::Mpi>>);
static_assert(strata::Strategy<strata::ShardedStrategy<strata::collective::Mpi, strata::ShardStage::optimizer_state>>);
static_assert(strata::checkpoints_supported<strata::ShardedStrategy<strata::collective::Mpi>>);
#endif

namespace {

int failures = 0;

void report(bool ok, int rank, int n, const std::string& what, const std::string& detail) {
  failures += ok ? 0 : 1;
  std::printf("%s rank %d of %d: %s: %s\n", ok ? "ok  " : "FAIL", rank, n, what.c_str(), detail.c_str());
}

std::string figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

/// Each step's loss, and the parameters after training `s`, against one device's.
template <class S>
void check_equivalent(S& strategy, const equivalence::Setup& s, const std::string& what) {
  std::vector<double> ref_losses, losses;
  const auto ref = equivalence::one_device_reference(s, &ref_losses);
  const auto got = equivalence::train_steps(strategy, s, &losses);
  const double diff = equivalence::max_relative_difference(got, ref);
  const double loss_diff = equivalence::loss_difference(losses, ref_losses);
  report(diff < 1e-5 && loss_diff < 1e-5, strategy.rank(), strategy.num_replicas_in_sync(), what,
         "parameters differ by " + figure(diff) + ", losses by " + figure(loss_diff) + " (relative) over " +
             std::to_string(losses.size()) + " steps");
}

/// The optimizer state a rank holds: Adam's two moments of its shards, about 2/N of the
/// parameters' elements (each bucket padded to N blocks of a multiple of 16 elements).
template <class S>
void check_state_is_sharded(S& strategy) {
  const int n = strategy.num_replicas_in_sync(), rank = strategy.rank();
  strata::manual_seed(7);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Adam(net.parameters(), 0.01); });
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset({})).batch(26).take(2));
  for (auto& batch : data)
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      opt.apply_gradients(ctx, strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size), net.parameters()));
    }, batch);
  std::int64_t total = 0, state = 0;
  for (const strata::Tensor& p : net.parameters()) total += p.numel();
  for (const auto& [name, t] : opt.state()) state += t.numel();
  strata::PerReplica<double> mine(1);
  mine[0] = static_cast<double>(strategy.held_elements(net.parameters()));
  const double held_sum = strategy.reduce(strata::ReduceOp::Sum, mine);
  const auto held = static_cast<std::int64_t>(strategy.held_elements(net.parameters()));
  const bool ok = state == 2 * held && held_sum == static_cast<double>(total) && held <= total / n + 16 * 4;
  report(ok, rank, n, "optimizer state in shards",
         "this rank holds " + std::to_string(held) + " of " + std::to_string(total) + " elements, Adam state " +
             std::to_string(state) + " (the ranks' shards sum to " + figure(held_sum) + ")");
  // Stages 2 and 3 hold no gradient bucket between steps (each gave its memory back after its
  // reduce-scatter); stage 1 keeps its buckets, at least a float per parameter.
  const std::size_t grads = strategy.gradient_bytes_held(net.parameters());
  const bool released = S::stage != strata::ShardStage::optimizer_state;
  report(released ? grads == 0 : grads >= 4 * static_cast<std::size_t>(total), rank, n,
         released ? "gradient buckets released between steps" : "gradient buckets kept (stage 1)",
         std::to_string(grads) + " bytes held for " + std::to_string(total) + " parameters");
  if (released) {  // a gradient read directly then is an error that says how to read it
    std::string what = "no error";
    try {
      (void)net.parameters().front().grad().template data<float>();
    } catch (const strata::invalid_argument& e) {
      what = e.what();
    }
    report(what.find("read it through the Gradients that grad() returns") != std::string::npos, rank, n,
           "a released gradient read directly", what);
  }
}

/// Stage 3: the size rule's units (at 4,096 bytes) are the MLP's first and last layers (the
/// middle one, 4,224 bytes with no modules to walk into, stays whole), and between steps each rank holds no
/// memory for them (its blocks alone); gathered, it holds each unit's whole parameters, whose
/// values are the trained ones on every rank.
template <class S>
void check_units_give_memory_back(S& strategy) {
  const int n = strategy.num_replicas_in_sync(), rank = strategy.rank();
  strata::manual_seed(7);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Adam(net.parameters(), 0.01); });
  for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset({})).batch(26).take(2)))
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      opt.apply_gradients(ctx, strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size), net.parameters()));
    }, batch);
  const std::vector<std::string> units = strategy.wrap_units(net.parameters());
  const std::size_t between = strategy.unit_bytes_held(net.parameters());
  std::size_t gathered = 0;
  double checksum = 0;
  {
    const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
    gathered = strategy.unit_bytes_held(net.parameters());
    for (const strata::Tensor& p : net.parameters())
      for (float v : p.to_vector<float>()) checksum += v;
  }
  strata::PerReplica<double> mine(1);
  mine[0] = checksum;
  const double mean = strategy.reduce(strata::ReduceOp::Mean, mine);
  std::string names;
  for (const auto& u : units) names += " '" + u + "'";
  report(units == std::vector<std::string>{"0", "4"} && between == 0 && gathered > 0 && checksum == mean &&
             strategy.unit_bytes_held(net.parameters()) == 0,
         rank, n, "wrap units give their memory back",
         "units" + names + "; bytes held between steps " + std::to_string(between) + ", gathered " +
             std::to_string(gathered) + ", again after " + std::to_string(strategy.unit_bytes_held(net.parameters())) +
             "; parameters' sum " + figure(checksum) + " (mean over ranks " + figure(mean) + ")");
}

/// Three steps of the MLP where, in step 1, one rank's loss adds inf times the sum of the last
/// parameter: that parameter's summed gradient alone is infinite, and it lies in one rank's
/// shard, so the other ranks' shards are finite. With the loss scale (or NonFinite::skip)
/// every rank must skip that step (and halve the scale), as one device does with the same
/// poison: the parameters, the scale and the skipped steps are compared.
template <class S>
std::vector<std::vector<float>> poisoned_run(S& strategy, bool loss_scale, int poisoned_rank) {
  strata::manual_seed(7);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  if (loss_scale)
    opt.set_loss_scale();
  else
    opt.set_nonfinite(strata::optim::NonFinite::skip);
  std::int64_t step = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset({})).batch(26).take(3))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      strata::Tensor loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      if (step == 1 && ctx.replica_id_in_sync_group() == poisoned_rank)
        loss = strata::add(loss, strata::mul(strata::sum(net.parameters().back()),
                                             std::numeric_limits<double>::infinity()));
      opt.apply_gradients(ctx, strata::grad(opt.scale_loss(loss), net.parameters()));
    }, batch);
    ++step;
  }
  std::vector<std::vector<float>> out;
  const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
  for (const strata::Tensor& p : net.parameters()) out.push_back(p.to_vector<float>());
  const strata::optim::Optimizer& held = opt;
  out.push_back({static_cast<float>(loss_scale ? held.loss_scale()->scale() : 0), static_cast<float>(held.skipped_steps())});
  return out;
}

template <class S>
void check_nonfinite_in_one_shard(S& strategy) {
  const int n = strategy.num_replicas_in_sync(), rank = strategy.rank();
  for (bool loss_scale : {true, false}) {
    strata::OneDeviceStrategy one;
    const auto ref = poisoned_run(one, loss_scale, 0);
    const auto got = poisoned_run(strategy, loss_scale, n - 1);
    const double diff = equivalence::max_relative_difference(got, ref);
    report(diff < 1e-5 && got.back() == ref.back() && got.back()[1] == 1.0f, rank, n,
           loss_scale ? "loss scale, one shard non-finite" : "NonFinite::skip, one shard non-finite",
           "skipped " + figure(got.back()[1]) + " (one device " + figure(ref.back()[1]) + "), scale " +
               figure(got.back()[0]) + " (" + figure(ref.back()[0]) + "), parameters differ by " + figure(diff));
  }
}

template <class S>
void check_whole_gradients(S& strategy) {
  strata::OneDeviceStrategy one;
  const double diff = equivalence::max_relative_difference(equivalence::first_gradients(strategy), equivalence::first_gradients(one));
  report(diff < 1e-5, strategy.rank(), strategy.num_replicas_in_sync(), "grads[i] read whole",
         "differ from one device's gradients by " + figure(diff) + " (relative)");
}

/// A gradient transform of one's own (it would read whole gradients) is an error that says
/// what to use instead, raised by scope() before any step.
template <class S>
void check_own_transform(S& strategy) {
  const int n = strategy.num_replicas_in_sync(), rank = strategy.rank();
  auto net = strategy.scope([] { return equivalence::model(false); });
  try {
    auto opt = strategy.scope([&] {
      strata::optim::Sgd o(net.parameters(), 0.1);
      o.set_gradient_transform([](const strata::Gradients&) {});
      return o;
    });
    report(false, rank, n, "own gradient transform", "no error");
  } catch (const strata::invalid_argument& e) {
    const std::string w = e.what();
    report(w.find("only their shards") != std::string::npos, rank, n, "own gradient transform", w);
  }
}

/// An optimizer made outside the strategy's scope fails its first apply_gradients on every
/// rank, naming the fix (the test expects this program to fail with that message).
template <class C>
int outside_scope() {
  strata::ShardedStrategy<C> strategy;
  auto net = strategy.scope([] { return equivalence::model(false); });
  strata::optim::Sgd outside(net.parameters(), 0.1);
  auto data = strategy.distribute(strata::data::Pipeline(equivalence::dataset({})).batch(26).take(1));
  for (auto& batch : data)
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      outside.apply_gradients(ctx, strata::grad(equivalence::replica_loss(net, b.x, b.y, b.global_size),
                                                net.parameters()));
    }, batch);
  return 0;
}

template <class C, strata::ShardStage Stage>
void check_stage(const char* stage_name) {
  std::unique_ptr<strata::ShardedStrategy<C, Stage>> made;
  // Stage 3: the size rule at a size that makes units of the test models' layers and blocks.
  strata::ShardOptions units;
  units.unit_bytes = 4096;
  if constexpr (std::is_constructible_v<C, const std::string&>)  // Gloo: a rendezvous prefix per strategy
    made = std::make_unique<strata::ShardedStrategy<C, Stage>>(strata::MultiWorkerOptions{.bucket_bytes = 2048}, units,
                                                               std::string("sharded_") + stage_name);
  else
    made = std::make_unique<strata::ShardedStrategy<C, Stage>>(strata::MultiWorkerOptions{.bucket_bytes = 2048}, units);
  auto& strategy = *made;
  const std::string prefix = std::string(stage_name) + ": ";
  {
    equivalence::Setup s;  // Adam, clipping, a cosine schedule, Dropout, global batch 25
    s.adam = true;
    s.clip_norm = 0.5;
    s.schedule = true;
    s.dropout = true;
    s.global_batch = 25;
    s.examples = 500;  // 20 steps
    check_equivalent(strategy, s, prefix + "mlp, Adam, clipping, cosine, dropout, global batch 25");
  }
  for (int k : {1, 2}) {
    equivalence::Setup s;
    s.conv = true;
    s.accumulation = k;
    check_equivalent(strategy, s, prefix + "cnn, SGD with momentum, k=" + std::to_string(k));
  }
  check_state_is_sharded(strategy);
  check_own_transform(strategy);
  if constexpr (Stage == strata::ShardStage::parameters) {
    check_units_give_memory_back(strategy);
    // The poison reads the last layer's bias in the loss, outside any unit's forward: that
    // layer stays whole (the units named: the first two layers).
    strata::ShardOptions named;
    named.wrap_units = {"0", "2"};
    std::unique_ptr<strata::ShardedStrategy<C, Stage>> by_name;
    if constexpr (std::is_constructible_v<C, const std::string&>)
      by_name = std::make_unique<strata::ShardedStrategy<C, Stage>>(strata::MultiWorkerOptions{.bucket_bytes = 2048},
                                                                    named, std::string("sharded_named"));
    else
      by_name = std::make_unique<strata::ShardedStrategy<C, Stage>>(strata::MultiWorkerOptions{.bucket_bytes = 2048}, named);
    check_nonfinite_in_one_shard(*by_name);
  } else {
    check_nonfinite_in_one_shard(strategy);
  }
  check_whole_gradients(strategy);
  // The reference models (BatchNorm, SyncBatchNorm, the Transformer) on an epoch whose last
  // batch leaves ranks without rows; under bfloat16; under float16 with the loss scale and the
  // last rank's loss infinite in the second step (every rank skips it, as one device does).
  const std::string who = prefix + std::to_string(strategy.num_replicas_in_sync()) + " processes";
  auto get = [&]() -> auto& { return strategy; };
  failures += zero_rows::check_models(who, get);
  failures += zero_rows::check_models(who, get, zero_rows::kBf16Models, strata::precision::bfloat16);
  failures += zero_rows::check_models(who, get, zero_rows::kBf16Models, strata::precision::float16,
                                      {.replica = strategy.num_replicas_in_sync() - 1, .step = 1});
  // Distributed evaluation and metrics: the counts of one pass over the rows, on every rank.
  failures += equivalence::check_evaluation(strategy, (prefix + "rank " + std::to_string(strategy.rank())).c_str());
}

template <class C>
int check_all() {
  check_stage<C, strata::ShardStage::optimizer_state>("stage 1");
  check_stage<C, strata::ShardStage::gradients>("stage 2");
  check_stage<C, strata::ShardStage::parameters>("stage 3");
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  try {
    const bool outside = argc > 2 && std::string(argv[2]) == "outside_scope";
#if STRATA_HAS_MPI
    if (which == "mpi") return outside ? outside_scope<strata::collective::Mpi>() : check_all<strata::collective::Mpi>() == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return outside ? outside_scope<strata::collective::Gloo>() : check_all<strata::collective::Gloo>() == 0 ? 0 : 1;
#endif
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("usage: sharded_equivalence mpi|gloo (built with: %s%s)\n", STRATA_HAS_MPI ? "mpi " : "",
              STRATA_HAS_GLOO ? "gloo" : "");
  return 2;
}

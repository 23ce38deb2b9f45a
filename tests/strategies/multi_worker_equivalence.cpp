// MultiWorkerMirroredStrategy<C> across processes ends where OneDeviceStrategy ends on the
// same global batch (each process computes that reference itself); with gradient
// accumulation (k = 2) too, and for a CNN; uneven inputs across workers (RELIABILITY D2) are
// caught or joined, never a hang. Run under mpirun (C = Mpi) or strata-run (Gloo).
//   multi_worker_equivalence mpi|gloo        exit status 0: every check held on this rank
#include <cstdio>
#include <filesystem>
#include <memory>
#include <unistd.h>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "strategies/equivalence.hpp"
#include "strategies/zero_rows.hpp"
#include "support/damage.hpp"

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

#if STRATA_HAS_MPI
static_assert(strata::Strategy<strata::MultiWorkerMirroredStrategy<strata::collective::Mpi>>);
// Every process takes the chief's checkpoint and learns whether its save failed (checkpointing.hpp).
static_assert(strata::detail::SharesChiefTensors<strata::MultiWorkerMirroredStrategy<strata::collective::Mpi>> &&
              strata::detail::SharesSaveOutcome<strata::MultiWorkerMirroredStrategy<strata::collective::Mpi>> &&
              !strata::detail::ShardedCheckpoints<strata::MultiWorkerMirroredStrategy<strata::collective::Mpi>>);
#endif
#if STRATA_HAS_GLOO
static_assert(strata::Strategy<strata::MultiWorkerMirroredStrategy<strata::collective::Gloo>>);
#endif

namespace {

template <class C>
int check_uneven(strata::MultiWorkerMirroredStrategy<C>& strategy);
template <class C>
int check_compression(int n, int rank);
template <class C>
int check_nonfinite(strata::MultiWorkerMirroredStrategy<C>& strategy);
template <class C>
int check_shared_saves(strata::MultiWorkerMirroredStrategy<C>& strategy);
template <class C>
int check_split_update(int n, int rank);

template <class C>
int check_all() {
  int failures = 0;
  strata::MultiWorkerMirroredStrategy<C> strategy({.bucket_bytes = 2048});
  const int rank = strategy.rank(), n = strategy.num_replicas_in_sync();
  for (bool conv : {false, true})
    for (int k : {1, 2}) {
      equivalence::Setup s;
      s.conv = conv;
      s.accumulation = k;
      std::vector<double> ref_losses, losses;
      const auto ref = equivalence::one_device_reference(s, &ref_losses);
      const auto got = equivalence::train_steps(strategy, s, &losses);
      const double diff = equivalence::max_relative_difference(got, ref);
      const double loss_diff = equivalence::loss_difference(losses, ref_losses);
      const bool ok = diff < 1e-5 && loss_diff < 1e-5;
      failures += ok ? 0 : 1;
      std::printf("%s rank %d of %d: %s k=%d  parameters differ by %.3g (relative), losses by %.3g over %zu steps\n",
                  ok ? "ok  " : "FAIL", rank, n, conv ? "cnn" : "mlp", k, diff, loss_diff, losses.size());
    }
  // The user's losses: MSE and a label-smoothed cross-entropy (compute_average_loss), on a
  // global batch of 25 (uneven over 2 and 3 processes).
  for (auto loss : {equivalence::Loss::mse, equivalence::Loss::smoothed_cross_entropy}) {
    const equivalence::Setup s = equivalence::user_loss_setup(loss);
    const auto ref = equivalence::one_device_reference(s);
    const double diff = equivalence::train_difference(strategy, s, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: %s, global batch 25: parameters differ by %.3g (relative)\n", ok ? "ok  " : "FAIL",
                rank, n, equivalence::user_loss_name(loss), diff);
  }
  // Weights for inference from the chief: a fresh one-device model loaded from the file holds
  // what every rank holds, bit for bit, and what one device trained.
  {
    equivalence::Setup s;
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_steps(one, s);
    const auto path = std::filesystem::temp_directory_path() / ("strata_mwm_weights_" + std::to_string(n) + ".weights");
    const auto [held_diff, loaded_diff] = equivalence::saved_weights_difference(strategy, s, ref, path);
    const bool ok = held_diff == 0 && loaded_diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: save_weights from the chief, loaded into a one-device model: %.3g from this rank's "
                "parameters, %.3g from one device's (relative)\n", ok ? "ok  " : "FAIL", rank, n, held_diff, loaded_diff);
  }
  // A model with Dropout: each example draws the mask it draws on one device (a global batch
  // of 25, uneven over the processes; and with two micro-batches per step).
  for (int k : {1, 2}) {
    equivalence::Setup s;
    s.dropout = true;
    s.global_batch = 25;
    s.accumulation = k;
    const auto ref = equivalence::one_device_reference(s);
    const double diff = equivalence::train_difference(strategy, s, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: dropout, k=%d: parameters differ by %.3g (relative)\n", ok ? "ok  " : "FAIL", rank, n, k,
                diff);
  }
  // A table with row-sparse gradients, updated lazily: each process looks up rows of its
  // own, and the ranks update the rows one device does (global batch 25, two micro-batches),
  // whether the engine gathers the rows or all-reduces the table dense.
  for (const char* way : {"gather", "dense"})
    for (int k : {1, 2}) {
      const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", way);
      equivalence::Setup s;
      s.table = true;
      s.global_batch = 25;
      s.accumulation = k;
      const auto ref = equivalence::one_device_reference(s);
      const strata::GradientStats before = strategy.gradient_stats();
      const double diff = equivalence::train_difference(strategy, s, ref);
      const strata::GradientStats after = strategy.gradient_stats();
      const bool gather = std::string_view(way) == "gather";
      const std::int64_t steps = after.steps - before.steps;
      const bool took = steps > 0 && (gather ? after.tables_gathered - before.tables_gathered
                                             : after.tables_dense - before.tables_dense) == steps;
      const bool ok = diff < 1e-5 && took;
      failures += ok ? 0 : 1;
      std::printf("%s rank %d of %d: row-sparse table, lazy updates, %s, k=%d: parameters differ by %.3g (relative); "
                  "%lld steps, %lld gathered, %lld dense\n",
                  ok ? "ok  " : "FAIL", rank, n, way, k, diff, static_cast<long long>(steps),
                  static_cast<long long>(after.tables_gathered - before.tables_gathered),
                  static_cast<long long>(after.tables_dense - before.tables_dense));
    }
  // SyncBatchNorm: statistics over the global batch, summed across the processes in the
  // middle of forward and of backward (after the gradient buckets in flight), so the ranks
  // train as one device does; parameters and running statistics compared (global batch 25).
  for (bool conv : {false, true}) {
    equivalence::Setup s;
    s.sync_batch_norm = true;
    s.conv = conv;
    s.global_batch = 25;
    s.examples = 20 * 25 + 10;
    strata::OneDeviceStrategy one;
    const auto ref = equivalence::train_steps(one, s);
    const double diff = equivalence::train_difference(strategy, s, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: SyncBatchNorm (%s): parameters and running statistics differ by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", rank, n, conv ? "conv" : "mlp", diff);
  }
  // Per-replica norms: their running statistics follow the global batch's, settled at the end
  // of each step in one sum across the processes (and before an evaluation-mode norm).
  {
    const double diff = equivalence::per_replica_norms_difference(strategy);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: per-replica BatchNorm: evaluation outputs and running statistics differ by %.3g "
                "(relative)\n",
                ok ? "ok  " : "FAIL", rank, n, diff);
  }
  // A dataset of three inputs and no labels, for a model of two (global batch 25, uneven).
  {
    strata::OneDeviceStrategy one;
    const double diff = equivalence::max_relative_difference(equivalence::train_two_inputs(strategy, 25),
                                                             equivalence::train_two_inputs(one, 25));
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: several inputs, no labels: parameters differ by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", rank, n, diff);
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
    const double diff = equivalence::train_difference(strategy, own, ref);
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: per-worker input function: parameters differ by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", rank, n, diff);
  }
  // reduce of an integer per replica (a count of correct answers): exact, on every rank.
  {
    strata::PerReplica<std::int64_t> c(1);
    c[0] = rank + 1;
    const bool ok = strategy.reduce(strata::ReduceOp::Sum, c) == std::int64_t{n} * (n + 1) / 2;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: reduce of an int64_t per replica\n", ok ? "ok  " : "FAIL", rank, n);
  }
  // gather: rank r contributes r + 1 rows of the value r, everyone gets them in rank order.
  {
    strata::PerReplica<strata::Tensor> v(1);
    v[0] = strata::full({rank + 1, 3}, static_cast<double>(rank));
    const strata::Tensor all = strategy.gather(v);
    std::vector<float> want;
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < 3 * (r + 1); ++k) want.push_back(static_cast<float>(r));
    const bool ok = all.dim(0) == n * (n + 1) / 2 && all.dim(1) == 3 && all.to_vector<float>() == want;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: gather of uneven rows\n", ok ? "ok  " : "FAIL", rank, n);
  }
  // gather of a number per replica: every rank's, in rank order, on every rank.
  {
    strata::PerReplica<std::int64_t> c(1);
    c[0] = 100 + rank;
    std::vector<std::int64_t> want;
    for (int r = 0; r < n; ++r) want.push_back(100 + r);
    const bool ok = strategy.gather(c) == want;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: gather of an int64_t per replica\n", ok ? "ok  " : "FAIL", rank, n);
  }
  // A loss reduced as a local mean inside run() with n processes in sync: an error naming the fix.
  {
    const std::string e = equivalence::local_mean_error(strategy);
    const bool ok = e.find("Reduction::mean inside Strategy::run with " + std::to_string(n) + " replicas in sync") !=
                        std::string::npos &&
                    e.find("sum_over_global_batch") != std::string::npos;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: local mean inside run: %s\n", ok ? "ok  " : "FAIL", rank, n, e.c_str());
  }
  // The summed gradients read through grads[i] before apply_gradients: whole, whichever
  // thread reduces the buckets (the communication thread's may still be in flight).
  {
    strata::OneDeviceStrategy one;
    const double diff = equivalence::max_relative_difference(equivalence::first_gradients(strategy),
                                                             equivalence::first_gradients(one));
    const bool ok = diff < 1e-5;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: grads[i] before apply_gradients differ from one device's by %.3g (relative)\n",
                ok ? "ok  " : "FAIL", rank, n, diff);
  }
  // Distributed evaluation: exactly the counts of one pass over the rows, on every rank.
  failures += equivalence::check_evaluation(strategy, ("rank " + std::to_string(rank)).c_str());
  // An epoch whose last batch leaves ranks without rows: the reference models end where one
  // device ends (their zero gradients, not the last step's, in the all-reduce).
  failures += zero_rows::check_models(std::to_string(n) + " processes",
                                      [&]() -> auto& { return strategy; });
  // The same under the bfloat16 policy, set on each process's thread.
  failures += zero_rows::check_models(std::to_string(n) + " processes", [&]() -> auto& { return strategy; },
                                      zero_rows::kBf16Models, strata::precision::bfloat16);
  // Under float16 with the loss scale, the last rank's loss infinite in the second step: every
  // rank skips it and halves the scale, as one device does.
  failures += zero_rows::check_models(std::to_string(n) + " processes", [&]() -> auto& { return strategy; },
                                      zero_rows::kBf16Models, strata::precision::float16, {.replica = n - 1, .step = 1});
  return failures + check_uneven(strategy) + check_compression<C>(n, rank) + check_nonfinite(strategy) +
         check_shared_saves(strategy) + check_split_update<C>(n, rank);
}

// A strategy of its own (Gloo: under a fresh rendezvous prefix, `tag`).
template <class C>
std::unique_ptr<strata::MultiWorkerMirroredStrategy<C>> fresh_strategy(strata::MultiWorkerOptions o,
                                                                       const std::string& tag) {
  if constexpr (std::is_constructible_v<C, const std::string&>)
    return std::make_unique<strata::MultiWorkerMirroredStrategy<C>>(o, tag);
  else
    return std::make_unique<strata::MultiWorkerMirroredStrategy<C>>(o);
}

// What one rank ends a run_split with: its parameters, its optimizer's state, and whether its
// parameters live in the memory the ranks share.
struct SplitRun {
  std::vector<std::vector<float>> params;
  std::vector<std::pair<std::string, std::vector<float>>> state;
  bool shared = false;
  bool host_shares = false;  // the ranks can share memory at all (one host, STRATA_SHM not 0)
};

// `steps` steps of the MLP with the update split across the ranks or not; or, with `resume`,
// from its parameters and state (every rank loads them, as a restore does) at batch
// `resume_steps` on.
template <class C, class MakeOpt>
SplitRun run_split(strata::UpdateSplit mode, int steps, MakeOpt make_opt, const std::string& tag,
                   const SplitRun* resume = nullptr, std::int64_t resume_steps = 0) {
  auto strategy = fresh_strategy<C>(
      {.bucket_bytes = 2048, .split_update = mode, .split_choice = equivalence::kSwitchEveryProbe}, tag);
  strata::manual_seed(5);
  auto net = strategy->scope([] { return equivalence::model(false); });
  auto opt = strategy->scope([&] { return make_opt(net.parameters()); });
  if (resume) {
    strata::NoGradGuard no_grad;
    std::vector<std::pair<std::string, strata::Tensor>> st;
    for (std::size_t k = 0; k < net.parameters().size(); ++k) {
      strata::Tensor p = net.parameters()[k];
      p.copy_(strata::from_vector<float>(p.shape(), resume->params[k]));
    }
    for (const auto& [name, v] : resume->state) {
      const std::size_t i = std::stoul(name.substr(name.rfind('.') + 1));
      st.emplace_back(name, strata::from_vector<float>(net.parameters()[i].shape(), v));
    }
    opt.load_state(st, resume_steps);
  }
  equivalence::Setup s;
  auto pipeline = strata::data::Pipeline(equivalence::dataset(s)).batch(26).take(resume_steps + steps);
  pipeline.set_position(0, resume_steps);
  auto data = strategy->distribute(pipeline);
  for (auto& batch : data)
    strategy->run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
  SplitRun out;
  for (const strata::Tensor& p : net.parameters()) out.params.push_back(p.to_vector<float>());
  for (const auto& [name, t] : opt.state()) out.state.emplace_back(name, t.template to_vector<float>());
  try {  // only a tensor in a shared buffer has a peer's copy
    (void)strategy->collective().shared_peer(net.parameters()[0], 0);
    out.shared = true;
  } catch (const std::exception&) {
  }
  out.host_shares = strategy->collective().shared_buffer(1, strata::DType::u8).defined();  // collective
  return out;
}

// The update split across the ranks of one host (each updates its share in its copy, in
// shared memory, and writes it into the others'): every rank ends with the bits every rank
// gets by updating all of its copy, and its optimizer's state is whole (the tensors the ranks
// share), so the chief's checkpoint holds all of it. After load_state on every rank (a resume)
// the run goes on as an uninterrupted one does. Measured, switching between the two ways at
// every probe (rank 0 deciding, the others reading its choice in shared memory, whatever
// their own options say), the bits are the same too. SGD with Nesterov momentum, and Adam.
template <class C>
int check_split_update(int n, int rank) {
  int failures = 0;
  auto sgd = [](const std::vector<strata::Tensor>& p) {
    return strata::optim::Sgd(p, 0.1, {.momentum = 0.9, .nesterov = true});
  };
  auto adam = [](const std::vector<strata::Tensor>& p) { return strata::optim::Adam(p, 0.01); };
  auto check = [&](auto make_opt, const std::string& name) {
    using strata::UpdateSplit;
    const SplitRun whole = run_split<C>(UpdateSplit::off, 10, make_opt, "whole_" + name);
    const SplitRun split = run_split<C>(UpdateSplit::on, 6, make_opt, "split_" + name);
    const SplitRun whole6 = run_split<C>(UpdateSplit::off, 6, make_opt, "whole6_" + name);
    const bool same = !whole6.state.empty() && split.params == whole6.params && split.state == whole6.state &&
                      split.shared == split.host_shares && !whole6.shared;
    const SplitRun ten = run_split<C>(UpdateSplit::on, 10, make_opt, "ten_" + name);
    const SplitRun resumed = run_split<C>(UpdateSplit::on, 4, make_opt, "resumed_" + name, &split, 6);
    const double diff = equivalence::max_relative_difference(resumed.params, ten.params);
    const SplitRun switching = run_split<C>(UpdateSplit::measured, 10, make_opt, "switching_" + name);
    // Rank 0 measuring, the others told to split every step: they follow rank 0's choice.
    const SplitRun mixed = run_split<C>(rank == 0 ? UpdateSplit::measured : UpdateSplit::on, 10, make_opt,
                                        "mixed_" + name);
    const bool same_switching = switching.params == whole.params && switching.state == whole.state &&
                                mixed.params == whole.params && mixed.state == whole.state;
    const bool ok = same && diff < 1e-5 && same_switching;
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: split update, %s: %s the unsplit bits (parameters and state%s), resumed "
                "differs by %.3g; measured, switching: %s\n",
                ok ? "ok  " : "FAIL", rank, n, name.c_str(), same ? "equals" : "DIFFERS FROM",
                split.shared ? ", in shared memory" : ", NOT in shared memory", diff,
                same_switching ? "the same bits" : "DIFFERENT BITS");
  };
  check(sgd, "sgd");
  check(adam, "adam");
  return failures;
}

// A worker's own dataset of `n` examples.
strata::data::Pipeline worker_data(std::int64_t n) {
  equivalence::Setup s;
  s.examples = n;
  return strata::data::Pipeline(equivalence::dataset(s));
}

template <class S>
std::vector<double> parameter_range(S& strategy, const std::vector<strata::Tensor>& params) {
  double sum = 0;
  for (const strata::Tensor& p : params)
    for (float v : p.to_vector<float>()) sum += v;
  strata::PerReplica<double> v(1);
  v[0] = sum;
  return {strategy.reduce(strata::ReduceOp::Min, v), strategy.reduce(strata::ReduceOp::Max, v)};
}

// D3: rank 1's loss becomes NaN at step 3. With NonFinite::skip every process skips that step
// (the summed gradient is NaN everywhere): parameters stay equal on all ranks, the skip is
// counted once on each, training goes on.
template <class C>
int check_nonfinite(strata::MultiWorkerMirroredStrategy<C>& strategy) {
  strata::manual_seed(5);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  opt.set_nonfinite(strata::optim::NonFinite::skip);
  equivalence::Setup s;
  int step = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(26))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      if (step == 3 && strategy.rank() == 1) loss = loss * std::nan("");
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    if (++step == 6) break;
  }
  const auto range = parameter_range(strategy, net.parameters());
  const bool ok = range[0] == range[1] && std::isfinite(range[0]) && opt.skipped_steps() == 1 && opt.steps() == 5;
  std::printf("%s rank %d: a NaN on rank 1 at step 3: skipped %lld step(s), %lld applied, parameter sums min %.9g max %.9g\n",
              ok ? "ok  " : "FAIL", strategy.rank(), static_cast<long long>(opt.skipped_steps()),
              static_cast<long long>(opt.steps()), range[0], range[1]);
  return ok ? 0 : 1;
}

// C6: every rank calls save() into one directory, 20 times: only the chief writes, so the
// directory holds exactly the kept files, each complete, and no temporary.
template <class C>
int check_shared_saves(strata::MultiWorkerMirroredStrategy<C>& strategy) {
  strata::manual_seed(5);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2); });
  std::string dir = (std::filesystem::temp_directory_path() / ("strata_c6_" + std::to_string(::getpid()))).string();
  std::vector<unsigned char> name(dir.begin(), dir.end());
  strategy.share_from_chief(name);  // the chief's directory name
  dir.assign(name.begin(), name.end());
  strata::TrainingCheckpoints<strata::MultiWorkerMirroredStrategy<C>, decltype(net), decltype(opt)> ck(strategy, net, opt,
                                                                                                      dir, 3);
  for (std::int64_t step = 1; step <= 20; ++step) ck.save({step, 0, step});
  strata::PerReplica<double> done(1);
  done[0] = 1;
  (void)strategy.reduce(strata::ReduceOp::Sum, done);  // every rank has saved (or not)
  int bad = 0;
  std::string listing;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    listing += " " + e.path().filename().string();
    bad += e.path().filename().string()[0] == '.';
  }
  const auto steps = ck.manager().steps();
  const bool ok = bad == 0 && steps == std::vector<std::int64_t>{20, 19, 18} && ck.manager().latest().has_value();
  std::printf("%s rank %d: 20 saves from every rank into one directory:%s\n", ok ? "ok  " : "FAIL", strategy.rank(),
              listing.c_str());
  (void)strategy.reduce(strata::ReduceOp::Sum, done);  // every rank has looked before the chief damages them
  // C2: every checkpoint damaged: restore() is an error on every rank, naming the files (the
  // chief's reason travels to the others), until the run asks to start afresh.
  if (strategy.is_chief())
    for (std::int64_t step : steps) support::damage_last_tensor(ck.manager().path_for(step));
  (void)strategy.reduce(strata::ReduceOp::Sum, done);
  std::string refused;
  try {
    (void)ck.restore();
  } catch (const strata::data_error& e) {
    refused = e.what();
  }
  const bool named = refused.find("holds 3 checkpoint(s) and none can be read") != std::string::npos &&
                     refused.find(ck.manager().path_for(20).string()) != std::string::npos;
  const bool afresh = !ck.restore(strata::UnreadableCheckpoints::start_afresh).has_value();
  (void)strategy.reduce(strata::ReduceOp::Sum, done);
  const bool set_aside = ck.manager().steps().empty() && ck.manager().set_aside_steps() == steps;
  const bool ok_damaged = named && afresh && set_aside;
  std::printf("%s rank %d: every checkpoint damaged: restore() refused (%s), then started afresh with them set aside\n",
              ok_damaged ? "ok  " : "FAIL", strategy.rank(), refused.substr(0, refused.find('\n')).c_str());
  (void)strategy.reduce(strata::ReduceOp::Sum, done);  // every rank has looked before the chief cleans up
  if (strategy.is_chief()) std::filesystem::remove_all(dir);
  return ok && ok_damaged ? 0 : 1;
}

// D2: rank 0 has 10 batches, the others 12.
template <class C>
int check_uneven(strata::MultiWorkerMirroredStrategy<C>& strategy) {
  int failures = 0;
  const int rank = strategy.rank();
  const std::int64_t batches = rank == 0 ? 10 : 12;
  auto report = [&](bool ok, const char* what, const std::string& detail) {
    failures += ok ? 0 : 1;
    std::printf("%s rank %d: uneven inputs, %s: %s\n", ok ? "ok  " : "FAIL", rank, what, detail.c_str());
  };
  // (1) distribute(p) splits one dataset: different datasets fail at the epoch's start, on every rank.
  try {
    auto data = strategy.distribute(worker_data(8 * batches).batch(8 * strategy.num_replicas_in_sync()));
    for (auto& b : data) (void)b;
    report(false, "split", "no error");
  } catch (const strata::invalid_argument& e) {
    report(std::string(e.what()).find("inputs differ in length") != std::string::npos, "split", e.what());
  }
  // (2) per-worker inputs, error policy: every rank fails at step 10, the exhausted one says so.
  try {
    auto data = strategy.distribute(worker_data(8 * batches).batch(8), strata::Inputs::per_worker);
    for (auto& b : data) (void)b;
    report(false, "per_worker/error", "no error");
  } catch (const strata::invalid_argument& e) {
    const std::string w = e.what();
    const bool ok = w.find("step 10") != std::string::npos && w.find("exhausted: [0]") != std::string::npos &&
                    (rank == 0) == (w.find("this rank exhausted its inputs after 10 batches") != std::string::npos);
    report(ok, "per_worker/error", w);
  }
  // (3) join: 12 steps everywhere, rank 0 contributing empty batches at the end; equal parameters.
  strata::manual_seed(7);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  auto data = strategy.distribute(worker_data(8 * batches).batch(8), strata::Inputs::per_worker,
                                  strata::UnevenInputs::join);
  int steps = 0;
  std::int64_t last_global = 0;
  for (auto& batch : data) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
      opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
    }, batch);
    last_global = batch.global_size;
    ++steps;
  }
  const auto range = parameter_range(strategy, net.parameters());
  const std::int64_t want_last = 8 * (strategy.num_replicas_in_sync() - 1);
  report(steps == 12 && range[0] == range[1] && last_global == want_last, "join",
         "steps " + std::to_string(steps) + ", last global batch " + std::to_string(last_global) + " (want " +
             std::to_string(want_last) + "), parameter sums min " + std::to_string(range[0]) + " max " +
             std::to_string(range[1]));
  return failures;
}

// Compressed gradients (16 bits on the wire). Each step's all-reduced gradient is within
// (2N-1)·u·Σ|g_r| of the exact sum (GradientEngine, Compression); carried linearly through
// T SGD steps with momentum β, the parameters stay within T·(2N-1)·u relative of the exact
// run as long as one step's update stays below the parameters' scale (true here: lr 0.2).
template <class C>
int check_compression(int n, int rank) {
  int failures = 0;
  equivalence::Setup s;
  strata::OneDeviceStrategy one;
  const auto ref = equivalence::train_steps(one, s);
  const double steps = 21;
  for (auto [c, u, name] : {std::tuple{strata::Compression::fp16, std::ldexp(1.0, -11), "fp16"},
                            std::tuple{strata::Compression::bf16, std::ldexp(1.0, -8), "bf16"}}) {
    const strata::MultiWorkerOptions o{.bucket_bytes = 2048, .compression = c};
    double diff = 0;
    if constexpr (std::is_constructible_v<C, const std::string&>) {  // Gloo: a fresh rendezvous prefix
      strata::MultiWorkerMirroredStrategy<C> strategy(o, "compressed_" + std::string(name));
      diff = equivalence::train_difference(strategy, s, ref);
    } else {
      strata::MultiWorkerMirroredStrategy<C> strategy(o);
      diff = equivalence::train_difference(strategy, s, ref);
    }
    const double bound = steps * (2 * n - 1) * u;
    const bool ok = diff <= bound && diff > 0;  // > 0: the bytes did travel in 16 bits
    failures += ok ? 0 : 1;
    std::printf("%s rank %d of %d: %s compression, parameters differ by %.3g (bound %.3g)\n", ok ? "ok  " : "FAIL",
                rank, n, name, diff, bound);
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  try {
#if STRATA_HAS_MPI
    if (which == "mpi") return check_all<strata::collective::Mpi>() == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return check_all<strata::collective::Gloo>() == 0 ? 0 : 1;
#endif
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("usage: multi_worker_equivalence mpi|gloo (built with: %s%s)\n", STRATA_HAS_MPI ? "mpi " : "",
              STRATA_HAS_GLOO ? "gloo" : "");
  return 2;
}

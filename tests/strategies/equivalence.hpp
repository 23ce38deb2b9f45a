// The equivalence property of the synchronous strategies: N replicas trained on global batch B
// end with the parameters one replica gets on batch B. train_steps() runs the same loop under
// any strategy; compare() measures the largest difference relative to the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>  // setenv
#include <filesystem>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/strata.hpp>

namespace equivalence {

using strata::Tensor;

/// Sets an environment variable for a scope (a knob the strategies read when they make
/// their engines, such as STRATA_ROW_AGGREGATION), restoring its absence after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A measured split update (UpdateSplit::measured) that switches way at every probe, whatever
// the timings: steps 0 split, 1-4 not, 5-8 split, 9- not.
constexpr strata::SplitChoiceOptions kSwitchEveryProbe{
    .warmup = 0, .first_probe = 1, .probe_every = 2, .probe_steps = 2, .margin = -1e9};

/// The loss each replica computes: the fused cross-entropy over the global batch, a regression
/// (MSE against targets of +-1 from the labels), or a label-smoothed cross-entropy's
/// per-example losses averaged by compute_average_loss.
enum class Loss { cross_entropy, mse, smoothed_cross_entropy };

struct Setup {
  std::int64_t examples = 530;      // 21 batches of 26, the last one partial (10 examples)
  std::int64_t global_batch = 26;   // uneven over 3 and 4 replicas
  int accumulation = 1;             // micro-batches per step (k)
  bool conv = false;                // a small CNN instead of the MLP
  strata::data::Remainder remainder = strata::data::Remainder::keep;  // of the last, partial batch
  Loss loss = Loss::cross_entropy;
  bool schedule = false;  // a cosine learning-rate schedule with warm-up instead of the constant rate
  bool adam = false;      // Adam (lr 0.01) instead of SGD with momentum
  double clip_norm = 0;   // > 0: clip the aggregated gradients to this global norm
  bool shuffle = true;
  bool dropout = false;  // a Dropout layer in the model (keyed masks: the same per example on every strategy)
  // A SyncBatchNorm after the first layer: statistics over the global batch, so N replicas
  // train as one device does; its running statistics are returned after the parameters.
  bool sync_batch_norm = false;
  // Each worker shards the examples itself and batches its share (distribute(fn) with
  // InputContext; workers that run out first join with empty batches). Unshuffled, with a
  // global batch that divides by the workers, the global batches are one device's.
  bool per_worker_input = false;
  // A table looked up by buckets of the first inputs (TableFeatures) before the MLP, with
  // this gradient form and the optimizer's rule for it.
  bool table = false;
  strata::TableGradient table_gradient = strata::TableGradient::row_sparse;
  strata::optim::SparseUpdates sparse_updates = strata::optim::SparseUpdates::lazy;
  // Called on every process with its model (replica 0's copy) once the epoch is done.
  std::function<void(strata::nn::Module&)> after_training;
  // Called on every replica, with its id and its count of rows, as its step begins (a test
  // slows a replica down with it).
  std::function<void(int, std::int64_t)> on_replica_rows;
};

inline strata::data::TensorDataset dataset(const Setup& s) {
  strata::Generator g(1234);
  const std::int64_t n = s.examples;
  Tensor x = s.conv ? strata::uniform({n, 1, 8, 8}, -1, 1, g) : strata::uniform({n, 20}, -1, 1, g);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(g.below(5));
  return strata::data::TensorDataset(x, strata::from_vector<std::int64_t>({n}, labels));
}

/// x [N, 20] -> [N, 20 + 8]: x, then the sum of the rows of a [kTableRows, 8] table that
/// x's first four inputs pick (each bucketed into 16 rows of its own), duplicates frequent.
class TableFeatures : public strata::nn::Module {
 public:
  static constexpr std::int64_t kLookups = 4, kBuckets = 16, kTableRows = kLookups * kBuckets, kWidth = 8;
  explicit TableFeatures(strata::TableGradient g) : table_(&register_module("table", std::make_unique<strata::nn::Embedding>(
                                                                    kTableRows, kWidth, g))) {}
  Tensor forward(const Tensor& x) override {
    const std::int64_t n = x.dim(0);
    const Tensor xc = x.contiguous();
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * kLookups));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < kLookups; ++j) {
        const float v = xc.data<float>()[i * x.dim(1) + j];  // in [-1, 1)
        const auto b = std::clamp<std::int64_t>(static_cast<std::int64_t>((v + 1.0f) * 0.5f * kBuckets), 0, kBuckets - 1);
        idx[static_cast<std::size_t>(i * kLookups + j)] = j * kBuckets + b;
      }
    const Tensor rows = (*table_)(strata::from_vector<std::int64_t>({n, kLookups}, idx));  // [N, 4, 8]
    return strata::concat({x, strata::sum(rows, {1})}, 1);
  }

 private:
  strata::nn::Module* table_;
};

/// The MLP or the small CNN; with `dropout`, a Dropout(0.3) after the first activation; with
/// `sync_batch_norm`, a SyncBatchNorm before it; with `table`, TableFeatures first (the MLP).
inline strata::nn::Sequential model(bool conv, bool dropout = false, bool sync_batch_norm = false,
                                    std::optional<strata::TableGradient> table = std::nullopt) {
  using namespace strata::nn;
  Sequential m;
  if (table) {
    m.add(TableFeatures(*table));
    m.add(Linear(20 + TableFeatures::kWidth, 32));
    m.add(ReLU());
    m.add(Linear(32, 5));
    return m;
  }
  if (conv) {
    m.add(Conv2d(1, 4, 3, 1, 1));
    if (sync_batch_norm) m.add(SyncBatchNorm(4));
    m.add(ReLU());
    if (dropout) m.add(Dropout(0.3));
    m.add(MaxPool2d(2));
    m.add(Flatten());
    m.add(Linear(64, 16));
    m.add(ReLU());
    m.add(Linear(16, 5));
  } else {
    m.add(Linear(20, 32));
    if (sync_batch_norm) m.add(SyncBatchNorm(32));
    m.add(ReLU());
    if (dropout) m.add(Dropout(0.3));
    m.add(Linear(32, 32));
    m.add(ReLU());
    m.add(Linear(32, 5));
  }
  return m;
}

/// Regression targets [N, 5] for labels [N]: +1 at the label's column, -1 elsewhere.
inline Tensor regression_targets(const Tensor& y) {
  const std::int64_t n = y.dim(0);
  Tensor t = strata::full({n, 5}, -1.0);
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i * 5 + y.data<std::int64_t>()[i]] = 1.0f;
  return t;
}

/// The loss of one replica's rows (or of one micro-batch of them), scaled by the global batch.
inline Tensor replica_loss(strata::nn::Module& m, const Tensor& x, const Tensor& y, std::int64_t global,
                           Loss loss = Loss::cross_entropy) {
  using strata::nn::Reduction;
  switch (loss) {
    case Loss::mse: return strata::nn::mse_loss(m(x), regression_targets(y), Reduction::sum_over_global_batch, global);
    case Loss::smoothed_cross_entropy:
      return strata::compute_average_loss(strata::nn::cross_entropy(m(x), y, Reduction::none, 0, 0.1), global);
    case Loss::cross_entropy: break;
  }
  return strata::nn::cross_entropy(m(x), y, Reduction::sum_over_global_batch, global);
}

template <strata::Strategy S, class Net, class Opt>
std::vector<std::vector<float>> train_steps_with(S& strategy, const Setup& s, Net& net, Opt& opt,
                                                 std::vector<double>* losses);

/// Trains under `strategy` and returns the final parameters (replica 0's) and the losses.
template <strata::Strategy S>
std::vector<std::vector<float>> train_steps(S& strategy, const Setup& s, std::vector<double>* losses = nullptr) {
  strata::manual_seed(7);
  auto net = strategy.scope([&] {
    return model(s.conv, s.dropout, s.sync_batch_norm, s.table ? std::optional(s.table_gradient) : std::nullopt);
  });
  if (s.adam) {
    auto opt = strategy.scope([&] { return strata::optim::Adam(net.parameters(), 0.01); });
    return train_steps_with(strategy, s, net, opt, losses);
  }
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  return train_steps_with(strategy, s, net, opt, losses);
}

/// train_steps' loop, with its model and optimizer made.
template <strata::Strategy S, class Net, class Opt>
std::vector<std::vector<float>> train_steps_with(S& strategy, const Setup& s, Net& net, Opt& opt,
                                                 std::vector<double>* losses) {
  opt.set_sparse_updates(s.sparse_updates);
  if (s.schedule) opt.set_schedule(strata::optim::Schedule::cosine(0.3, 20, 4, 0.01));
  if (s.clip_norm > 0) opt.clip_by_global_norm(s.clip_norm);
  auto pipeline = strata::data::Pipeline(dataset(s));
  if (s.shuffle) pipeline = pipeline.shuffle(3);
  auto per_worker = [&](const strata::InputContext& ctx) {
    return pipeline.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        .batch(ctx.per_worker_batch_size(s.global_batch), s.remainder);
  };
  auto each_batch = [&](auto&& data, auto&& step) {
    for (auto& batch : data) step(batch);
  };
  auto step = [&](const strata::data::Batch& batch) {
    auto out = strategy.run(
        [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          if (s.on_replica_rows) s.on_replica_rows(ctx.replica_id_in_sync_group(), b.size);
          const int k = s.accumulation;
          double total = 0;
          for (int m = 0; m < k; ++m) {  // micro-batch m: rows [lo, hi) of this replica's
            const std::int64_t lo = strata::data::detail::split_begin(b.size, m, k);
            const std::int64_t hi = strata::data::detail::split_begin(b.size, m + 1, k);
            Tensor loss = replica_loss(net, strata::data::slice_rows(b.x, lo, hi), strata::data::slice_rows(b.y, lo, hi),
                                       b.global_size, s.loss);
            total += loss.item();
            const auto mode = m == 0 ? strata::GradAccumulation::overwrite : strata::GradAccumulation::accumulate;
            if (m + 1 < k) {
              strata::NoSync no_sync(ctx);
              strata::grad(loss, net.parameters(), mode);
            } else {
              auto grads = strata::grad(loss, net.parameters(), mode);
              // A replica's own collective while gradient buckets may be in flight: it must
              // come after them on every replica, and see every replica's rows.
              Tensor rows = strata::full({1}, static_cast<double>(b.size - b.padding), strata::DType::f64);
              ctx.all_reduce(strata::ReduceOp::Sum, rows);
              STRATA_CHECK(rows.item() == static_cast<double>(b.global_size), "all_reduce of the rows per replica gave ",
                           rows.item(), ", expected the global batch ", b.global_size);
              opt.apply_gradients(ctx, grads);
            }
          }
          return total;
        },
        batch);
    const double loss = strategy.reduce(strata::ReduceOp::Sum, out);
    if (losses) losses->push_back(loss);
  };
  if (!s.per_worker_input)
    each_batch(strategy.distribute(pipeline.batch(s.global_batch, s.remainder)), step);
  else if constexpr (requires { strategy.distribute(per_worker, strata::UnevenInputs::join); })
    each_batch(strategy.distribute(per_worker, strata::UnevenInputs::join), step);
  else
    each_batch(strategy.distribute(per_worker), step);
  // (ShardedStrategy's stage 3 keeps each rank's blocks alone between steps)
  const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
  if (s.after_training) {
    strata::nn::Module& trained = net;
    s.after_training(trained);
  }
  std::vector<std::vector<float>> params;
  for (const Tensor& p : net.parameters()) params.push_back(p.to_vector<float>());
  const strata::nn::Module& held = net;  // this replica's copy
  for (const Tensor& b : held.buffers()) params.push_back(b.to_vector<float>());
  return params;
}

/// The summed gradients grads[i] reads in the first step (before apply_gradients) of the MLP
/// with Adam on a global batch of 25: whole on every replica, one device's.
template <strata::Strategy S>
std::vector<std::vector<float>> first_gradients(S& strategy) {
  strata::manual_seed(7);
  auto net = strategy.scope([] { return model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Adam(net.parameters(), 0.01); });
  std::vector<std::vector<float>> out;
  std::mutex mutex;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(dataset({})).batch(25).take(1)))
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      const auto grads = strata::grad(replica_loss(net, b.x, b.y, b.global_size), net.parameters());
      {
        const std::lock_guard<std::mutex> lock(mutex);  // replica threads of one process: the first one's
        if (out.empty())
          for (std::size_t i = 0; i < grads.size(); ++i) out.push_back(grads[i].template to_vector<float>());
      }
      opt.apply_gradients(ctx, grads);
    }, batch);
  return out;
}

/// out = A x + B z: a model of two inputs.
class TwoInputs : public strata::nn::Module {
 public:
  TwoInputs() {
    a_ = &register_module("a", std::make_unique<strata::nn::Linear>(20, 5));
    b_ = &register_module("b", std::make_unique<strata::nn::Linear>(3, 5));
  }
  Tensor operator()(const Tensor& x, const Tensor& z) { return strata::add((*a_)(x), (*b_)(z)); }
  Tensor forward(const Tensor&) override {
    STRATA_CHECK(false, "TwoInputs takes two inputs: call model(x, z)");
    return {};
  }

 private:
  strata::nn::Module *a_, *b_;
};

/// A few steps of TwoInputs with Adam on a dataset of three inputs and no labels (the target is
/// input 2), MSE over the global batch; the final parameters.
template <strata::Strategy S>
std::vector<std::vector<float>> train_two_inputs(S& strategy, std::int64_t global_batch) {
  using namespace strata;
  Generator g(11);
  const std::int64_t n = 230;
  const data::TensorDataset ds(data::Inputs(uniform({n, 20}, -1, 1, g), uniform({n, 3}, -1, 1, g), uniform({n, 5}, -1, 1, g)));
  manual_seed(2);
  auto net = strategy.scope([] { return TwoInputs(); });
  auto opt = strategy.scope([&] { return optim::Adam(net.parameters(), 0.01); });
  for (auto& batch : strategy.distribute(data::Pipeline(ds).shuffle(5).batch(global_batch)))
    strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      STRATA_CHECK(!b.y.defined(), "a dataset without labels gave a batch labels");
      Tensor loss = nn::mse_loss(net(b.x, b.input(1)), b.input(2), nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(loss, net.parameters()));
    }, batch);
  std::vector<std::vector<float>> params;
  for (const Tensor& p : net.parameters()) params.push_back(p.to_vector<float>());
  return params;
}

/// What an evaluation of the untrained model (seed 7) reports over 1001 rows.
struct EvaluationFigures {
  std::int64_t correct = 0, examples = 0;
  std::vector<std::int64_t> confusion;  // [5 x 5], label-major
  double mean_loss = 0;
};
constexpr std::int64_t kEvaluationRows = 1001;

/// strata::evaluate under `strategy`: accuracy counts, the confusion count and the mean
/// cross-entropy over 1001 rows in batches of `batch`, the last one kept, dropped or padded.
template <strata::Strategy S>
EvaluationFigures evaluate_figures(S& strategy, strata::data::Remainder remainder, std::int64_t batch) {
  Setup s;
  s.examples = kEvaluationRows;
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return model(false); });
  strata::metrics::Accuracy accuracy;
  strata::metrics::ConfusionCount confusion(5);
  strata::metrics::Mean loss;
  strata::evaluate(strategy, net, strata::data::Pipeline(dataset(s)).batch(batch, remainder), accuracy, confusion,
                   [&](const Tensor& logits, const strata::data::Batch& b) {
                     loss.update(strata::nn::cross_entropy(logits, b.y, strata::nn::Reduction::none), b);
                   });
  EvaluationFigures f;
  const auto counts = accuracy.counts(strategy);
  f.correct = counts.correct;
  f.examples = counts.examples;
  f.confusion = confusion.result(strategy).template to_vector<std::int64_t>();
  f.mean_loss = loss.result(strategy);
  return f;
}

/// The same figures from one forward pass over the rows the policy keeps, in double: no
/// strategy, pipeline or metric.
inline EvaluationFigures direct_figures(strata::data::Remainder remainder, std::int64_t batch) {
  Setup s;
  s.examples = kEvaluationRows;
  strata::manual_seed(7);
  auto net = model(false);
  net.eval();
  const auto ds = dataset(s);
  const std::int64_t kept = remainder == strata::data::Remainder::drop ? s.examples / batch * batch : s.examples;
  const Tensor logits = net(strata::data::slice_rows(ds.x, 0, kept));
  const auto x = logits.to_vector<float>();
  const auto y = ds.y.to_vector<std::int64_t>();
  EvaluationFigures f;
  f.confusion.assign(25, 0);
  double loss = 0;
  for (std::int64_t r = 0; r < kept; ++r) {
    const float* row = x.data() + r * 5;
    std::int64_t best = 0;
    double mx = row[0], z = 0;
    for (std::int64_t c = 1; c < 5; ++c) {
      if (row[c] > row[best]) best = c;
      mx = std::max(mx, static_cast<double>(row[c]));
    }
    for (std::int64_t c = 0; c < 5; ++c) z += std::exp(static_cast<double>(row[c]) - mx);
    const std::int64_t label = y[static_cast<std::size_t>(r)];
    loss += mx + std::log(z) - row[label];
    f.correct += best == label;
    ++f.confusion[static_cast<std::size_t>(label * 5 + best)];
  }
  f.examples = kept;
  f.mean_loss = loss / static_cast<double>(kept);
  return f;
}

/// Whether `got` counts exactly what `want` counts, and its mean loss agrees to float32 sums.
inline bool same_figures(const EvaluationFigures& got, const EvaluationFigures& want) {
  return got.correct == want.correct && got.examples == want.examples && got.confusion == want.confusion &&
         std::fabs(got.mean_loss - want.mean_loss) <= 1e-5 * std::fabs(want.mean_loss);
}

/// evaluate() under `strategy` against one forward pass, for every remainder policy and a
/// batch that leaves some replicas without rows; prints a line each, returns the failures.
template <strata::Strategy S>
int check_evaluation(S& strategy, const char* who) {
  int failures = 0;
  for (const auto rem : {strata::data::Remainder::keep, strata::data::Remainder::drop, strata::data::Remainder::pad})
    for (const std::int64_t batch : {64, 1000}) {
      const auto want = direct_figures(rem, batch);
      const auto got = evaluate_figures(strategy, rem, batch);
      const bool ok = same_figures(got, want);
      failures += ok ? 0 : 1;
      std::printf("%s %s: evaluate over %lld rows, batch %lld, remainder %s: %lld of %lld correct (one pass: %lld of "
                  "%lld), mean loss %.7g (%.7g)\n",
                  ok ? "ok  " : "FAIL", who, static_cast<long long>(kEvaluationRows), static_cast<long long>(batch),
                  rem == strata::data::Remainder::keep ? "keep" : rem == strata::data::Remainder::drop ? "drop" : "pad",
                  static_cast<long long>(got.correct), static_cast<long long>(got.examples),
                  static_cast<long long>(want.correct), static_cast<long long>(want.examples), got.mean_loss,
                  want.mean_loss);
    }
  return failures;
}

/// Inside `strategy.run`, a loss reduced as a local mean: the error it raises there (caught in
/// the replica function, so the job goes on), or "" if it raised none.
template <strata::Strategy S>
std::string local_mean_error(S& strategy) {
  std::string message;
  strategy.run([&](strata::ReplicaContext&) {
    try {
      (void)strata::nn::mse_loss(strata::ones({4, 2}), strata::zeros({4, 2}));
    } catch (const strata::invalid_argument& e) {
      message = e.what();
    }
  });
  return message;
}

/// max over parameters of max|a - b| / max|b|.
inline double max_relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i][k]) - b[i][k]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i][k])));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  return worst;
}

/// The users' losses as the multi-process equivalences run them: `loss` on a global batch of 25,
/// MSE with a cosine schedule with warm-up, the label-smoothed cross-entropy clipped to norm 0.1.
/// The largest relative difference between two runs' losses, step by step (1 where they took
/// a different number of steps).
inline double loss_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = a.size() == b.size() ? 0.0 : 1.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return d;
}

inline Setup user_loss_setup(Loss loss) {
  Setup s;
  s.loss = loss;
  s.global_batch = 25;
  s.schedule = loss == Loss::mse;
  s.clip_norm = loss == Loss::smoothed_cross_entropy ? 0.1 : 0;
  return s;
}

/// What user_loss_setup(loss) trains, in words.
inline const char* user_loss_name(Loss loss) {
  return loss == Loss::mse ? "mse with a cosine schedule" : "smoothed cross-entropy clipped to norm 0.1";
}

/// One device's parameters after training `s` in whole batches (s.accumulation's micro-batches
/// sum to the same gradient): the reference every strategy is held to.
inline std::vector<std::vector<float>> one_device_reference(const Setup& s, std::vector<double>* losses = nullptr) {
  strata::OneDeviceStrategy one;
  Setup plain = s;
  plain.accumulation = 1;
  return train_steps(one, plain, losses);
}

/// How far `strategy`'s parameters after training `s` are from `ref` (max_relative_difference).
template <strata::Strategy S>
double train_difference(S& strategy, const Setup& s, const std::vector<std::vector<float>>& ref) {
  return max_relative_difference(train_steps(strategy, s), ref);
}

/// How far weights saved by the chief are, loaded into a fresh one-device model, from this
/// rank's trained parameters (`held`) and from one device's (`loaded`, against `ref`).
struct SavedWeightsDifference {
  double held = 1, loaded = 1;
};

/// Trains `s` under a multi-process `strategy`; the chief saves the weights to `path`, every
/// rank loads them into a fresh model, and the chief removes the file once every rank has read it.
template <strata::Strategy S>
SavedWeightsDifference saved_weights_difference(S& strategy, Setup s, const std::vector<std::vector<float>>& ref,
                                                const std::filesystem::path& path) {
  SavedWeightsDifference d;
  s.after_training = [&](strata::nn::Module& trained) {
    if (strategy.is_chief()) strata::save_weights(trained, path);
    double written = 0;  // every rank waits for the chief's file
    strategy.sum_across_processes(std::span<double>(&written, 1));
    auto fresh = model(false);
    strata::load_weights(fresh, path);
    std::vector<std::vector<float>> mine, loaded;
    for (const strata::Tensor& p : trained.parameters()) mine.push_back(p.to_vector<float>());
    for (const strata::Tensor& p : fresh.parameters()) loaded.push_back(p.to_vector<float>());
    d.held = max_relative_difference(loaded, mine);
    d.loaded = max_relative_difference(loaded, ref);
    strategy.sum_across_processes(std::span<double>(&written, 1));  // every rank has read it
    if (strategy.is_chief()) std::filesystem::remove(path);
  };
  (void)train_steps(strategy, s);
  return d;
}

/// Two per-replica norms of the same input: in training mode a(x), b(x), a(2x), whose
/// running-statistics updates queue up in that order until the step's end; in evaluation
/// mode b(a(x)).
class TwoNorms : public strata::nn::Module {
 public:
  TwoNorms() {
    a_ = &register_module("a", std::make_unique<strata::nn::BatchNorm1d>(6));
    b_ = &register_module("b", std::make_unique<strata::nn::BatchNorm1d>(6, 1e-5, 0.3));
  }
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return (*b_)((*a_)(x));
    (void)(*a_)(x);
    (void)(*b_)(x);
    return (*a_)(strata::mul(x, 2.0));
  }

 private:
  strata::nn::Module *a_, *b_;
};

/// Three steps of TwoNorms (global batches of 25, 25 and 10 rows), each a training-mode
/// forward then an evaluation-mode one inside the step, against one device doing the same on
/// the global batch: the largest relative difference of the evaluation outputs (each replica
/// its rows) and of every replica's running statistics at the end.
template <strata::Strategy S>
double per_replica_norms_difference(S& strategy) {
  strata::Generator g(9);
  const Tensor x = strata::add(strata::uniform({60, 6}, -1, 1, g), strata::full({60, 6}, 0.5));
  const strata::data::TensorDataset data(x, x);
  auto net = strategy.scope([] { return TwoNorms(); });
  TwoNorms ref;
  double worst = 0;
  int steps = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(data).batch(25))) {
    const std::int64_t start = 25 * steps++;
    const Tensor global = strata::slice(x, 0, start, std::min<std::int64_t>(start + 25, 60));
    (void)ref(global);
    ref.eval();
    const Tensor want = ref(global);
    ref.train();
    const auto got = strategy.run([&](strata::ReplicaContext&, const strata::data::Batch& b) {
      strata::nn::Module& local = net;  // this replica's copy
      (void)local(b.x);
      local.eval();
      const Tensor y = local(b.x);
      local.train();
      return max_relative_difference({y.to_vector<float>()},
                                     {strata::slice(want, 0, b.global_offset, b.global_offset + b.size).to_vector<float>()});
    }, batch);
    for (std::size_t r = 0; r < got.size(); ++r) worst = std::max(worst, got[r]);
  }
  if (steps != 3) return INFINITY;
  const auto held = strategy.run([&](strata::ReplicaContext&) {  // every replica's running statistics
    const strata::nn::Module& local = net;
    double w = 0;
    for (std::size_t k = 0; k < ref.buffers().size(); ++k)
      w = std::max(w, max_relative_difference({local.buffers()[k].to_vector<float>()}, {ref.buffers()[k].to_vector<float>()}));
    return w;
  });
  for (std::size_t r = 0; r < held.size(); ++r) worst = std::max(worst, held[r]);
  return worst;
}

}  // namespace equivalence

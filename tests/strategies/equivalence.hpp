// The equivalence property of the synchronous strategies: N replicas trained on global batch B
// end with the parameters one replica gets on batch B. train_steps() runs the same loop under
// any strategy; compare() measures the largest difference relative to the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include <strata/strata.hpp>

namespace equivalence {

using strata::Tensor;

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
  double clip_norm = 0;   // > 0: clip the aggregated gradients to this global norm
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

inline strata::nn::Sequential model(bool conv) {
  using namespace strata::nn;
  if (conv)
    return Sequential(Conv2d(1, 4, 3, 1, 1), ReLU(), MaxPool2d(2), Flatten(), Linear(64, 16), ReLU(), Linear(16, 5));
  return Sequential(Linear(20, 32), ReLU(), Linear(32, 32), ReLU(), Linear(32, 5));
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

/// Trains under `strategy` and returns the final parameters (replica 0's) and the losses.
template <strata::Strategy S>
std::vector<std::vector<float>> train_steps(S& strategy, const Setup& s, std::vector<double>* losses = nullptr) {
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return model(s.conv); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2, {.momentum = 0.9}); });
  if (s.schedule) opt.set_schedule(strata::optim::Schedule::cosine(0.3, 20, 4, 0.01));
  if (s.clip_norm > 0) opt.clip_by_global_norm(s.clip_norm);
  auto data = strategy.distribute(strata::data::Pipeline(dataset(s)).shuffle(3).batch(s.global_batch, s.remainder));
  for (auto& batch : data) {
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
  }
  std::vector<std::vector<float>> params;
  for (const Tensor& p : net.parameters()) params.push_back(p.to_vector<float>());
  return params;
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

}  // namespace equivalence

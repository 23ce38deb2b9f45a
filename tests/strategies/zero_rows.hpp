// An epoch whose last batch is smaller than the replica count: the replicas it leaves without
// rows still take part in the step, with zero gradients, so N replicas end the epoch where one
// device ends it. The reference models (the CNN, the ResNet with per-replica BatchNorm and
// with SyncBatchNorm, a small character Transformer) on 11 examples in global batches of 5:
// 5, 5 and 1 rows, uneven over 2, 3 and 4 replicas, and a last step that leaves all but one
// without rows.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <strata/models/char_transformer.hpp>
#include <strata/models/fashion_mnist.hpp>
#include <strata/strata.hpp>

#include "strategies/equivalence.hpp"  // max_relative_difference

namespace zero_rows {

using strata::Tensor;

enum class Model { cnn, resnet, resnet_sync, transformer };
inline constexpr Model kModels[] = {Model::cnn, Model::resnet, Model::resnet_sync, Model::transformer};

inline const char* name(Model m) {
  switch (m) {
    case Model::cnn: return "cnn";
    case Model::resnet: return "resnet (BatchNorm)";
    case Model::resnet_sync: return "resnet (SyncBatchNorm)";
    case Model::transformer: return "transformer";
  }
  return "?";
}

inline constexpr std::int64_t kExamples = 11, kGlobalBatch = 5, kTokens = 8, kVocab = 13;

/// Images [11, 1, 28, 28] with 10 classes, or token windows [11, 8] and their next tokens.
inline strata::data::TensorDataset dataset(Model m) {
  strata::Generator g(21);
  if (m == Model::transformer) {
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(kExamples * (kTokens + 1)));
    for (auto& t : tokens) t = static_cast<std::int64_t>(g.below(kVocab));
    std::vector<std::int64_t> x, y;
    for (std::int64_t i = 0; i < kExamples; ++i)
      for (std::int64_t t = 0; t < kTokens; ++t) {
        x.push_back(tokens[static_cast<std::size_t>(i * (kTokens + 1) + t)]);
        y.push_back(tokens[static_cast<std::size_t>(i * (kTokens + 1) + t + 1)]);
      }
    return {strata::from_vector<std::int64_t>({kExamples, kTokens}, x),
            strata::from_vector<std::int64_t>({kExamples, kTokens}, y)};
  }
  std::vector<std::int64_t> labels(static_cast<std::size_t>(kExamples));
  for (auto& l : labels) l = static_cast<std::int64_t>(g.below(10));
  return {strata::uniform({kExamples, 1, 28, 28}, 0, 1, g), strata::from_vector<std::int64_t>({kExamples}, labels)};
}

/// The model, as one Sequential whatever its kind (so a scope's function returns one type).
inline strata::nn::Sequential make(Model m) {
  using strata::BatchStatistics;
  switch (m) {
    case Model::cnn: return strata::models::fashion_mnist_cnn();
    case Model::resnet: return strata::models::fashion_mnist_resnet(BatchStatistics::per_replica);
    case Model::resnet_sync: return strata::models::fashion_mnist_resnet(BatchStatistics::global);
    case Model::transformer: break;
  }
  strata::nn::Sequential s;
  s.add(strata::models::CharTransformer({.vocab = kVocab, .context = kTokens, .width = 16, .heads = 2, .layers = 2}));
  return s;
}

/// The cross-entropy of rows `x`, `y` summed over the global batch of `global` examples (of
/// `global` windows of kTokens predictions each, for the Transformer).
template <class Net>
Tensor replica_loss(Model m, Net& net, const Tensor& x, const Tensor& y, std::int64_t global) {
  using strata::nn::Reduction;
  if (m != Model::transformer) return strata::nn::cross_entropy(net(x), y, Reduction::sum_over_global_batch, global);
  const std::int64_t n = x.dim(0);
  return strata::nn::cross_entropy(strata::reshape(net(x), {n * kTokens, kVocab}), strata::reshape(y, {n * kTokens}),
                                   Reduction::sum_over_global_batch, global * kTokens);
}

/// Replica 0's parameters, then its buffers (running statistics), after the epoch.
template <class Net>
std::vector<std::vector<float>> state_of(const Net& net) {
  std::vector<std::vector<float>> out;
  const strata::nn::Module& held = net;
  for (const Tensor& p : held.parameters()) out.push_back(p.to_vector<float>());
  for (const Tensor& b : held.buffers()) out.push_back(strata::to_dtype(b, strata::DType::f32).to_vector<float>());
  return out;
}

/// A loss made infinite on one replica in one step (a float16 overflow there): none by default.
struct Poison {
  int replica = -1;
  std::int64_t step = -1;
  /// Whether replica `r` poisons its loss in step `step`, where it has rows (a replica without
  /// rows has no gradient for the infinity to reach).
  bool hits(int r, std::int64_t at, const Tensor& rows) const { return r == replica && at == step && rows.dim(0) > 0; }
};

/// `loss` times infinity where `poison` is true.
inline Tensor poisoned(const Tensor& loss, bool poison) {
  return poison ? strata::mul(loss, std::numeric_limits<double>::infinity()) : loss;
}

/// Under a policy that needs a loss scale (float16), the optimizer's scale, skipped steps and
/// steps, appended to its state: N replicas must decide like one device.
template <class Opt>
void add_loss_scale(std::vector<std::vector<float>>& state, const Opt& opt) {
  const strata::optim::Optimizer& held = opt;
  if (held.loss_scale())
    state.push_back({static_cast<float>(held.loss_scale()->scale()), static_cast<float>(held.skipped_steps()),
                     static_cast<float>(held.steps())});
}

/// One epoch of `m` under `strategy` (SGD with momentum, and the loss scale where the calling
/// thread's policy needs one); replica 0's state after it.
template <strata::Strategy S>
std::vector<std::vector<float>> train_epoch(S& strategy, Model m, Poison poison = {}) {
  strata::manual_seed(7);
  auto net = strategy.scope([&] { return make(m); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.05, {.momentum = 0.9}); });
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();
  std::int64_t step = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(dataset(m)).shuffle(3).batch(kGlobalBatch))) {
    strategy.run(
        [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          const Tensor loss = poisoned(replica_loss(m, net, b.x, b.y, b.global_size),
                                       poison.hits(ctx.replica_id_in_sync_group(), step, b.x));
          opt.apply_gradients(ctx, strata::grad(opt.scale_loss(loss), net.parameters()));
        },
        batch);
    ++step;
  }
  const strata::GatheredParameters whole = strata::gather_parameters(strategy, net.parameters());
  auto state = state_of(net);
  add_loss_scale(state, opt);
  return state;
}

/// One device's state after the epoch. With per-replica BatchNorm a step's statistics are each
/// replica's rows', so the reference for `replicas` replicas computes each replica's rows on
/// their own (as a strategy splits them: data::detail::split_begin), skips the shares with no
/// rows, and adds their gradients before the one update.
/// A `poison` makes the whole step's loss infinite, as one replica's makes the sum's.
inline std::vector<std::vector<float>> one_device_reference(Model m, int replicas, Poison poison = {}) {
  strata::OneDeviceStrategy one;
  strata::manual_seed(7);
  auto net = one.scope([&] { return make(m); });
  auto opt = one.scope([&] { return strata::optim::Sgd(net.parameters(), 0.05, {.momentum = 0.9}); });
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();
  const int shares = m == Model::resnet ? replicas : 1;
  std::int64_t step = 0;
  for (auto& batch : one.distribute(strata::data::Pipeline(dataset(m)).shuffle(3).batch(kGlobalBatch))) {
    one.run(
        [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          strata::Gradients grads{};
          bool first = true;
          for (int r = 0; r < shares; ++r) {
            const std::int64_t lo = strata::data::detail::split_begin(b.size, r, shares);
            const std::int64_t hi = strata::data::detail::split_begin(b.size, r + 1, shares);
            if (hi == lo) continue;
            const Tensor loss = poisoned(replica_loss(m, net, strata::data::slice_rows(b.x, lo, hi),
                                                      strata::data::slice_rows(b.y, lo, hi), b.global_size),
                                         first && poison.step == step);
            grads = strata::grad(opt.scale_loss(loss), net.parameters(),
                                 first ? strata::GradAccumulation::overwrite : strata::GradAccumulation::accumulate);
            first = false;
          }
          opt.apply_gradients(ctx, grads);
        },
        batch);
    ++step;
  }
  auto state = state_of(net);
  add_loss_scale(state, opt);
  return state;
}

/// The number of parameters of `m`.
inline std::size_t parameter_count(Model m) { return make(m).parameters().size(); }

/// How far `got` is from `ref` (max_relative_difference), over the parameters and the buffers;
/// over the parameters alone for per-replica BatchNorm, whose reference's running statistics
/// follow each share rather than the global batch, and where `parameters_only` (a parameter
/// server's rank, which holds the variables but runs no step).
inline double difference(Model m, std::vector<std::vector<float>> got, std::vector<std::vector<float>> ref,
                         bool parameters_only = false) {
  if (m == Model::resnet || parameters_only) {
    const std::size_t params = parameter_count(m);
    got.resize(std::min(got.size(), params));
    ref.resize(std::min(ref.size(), params));
  }
  return equivalence::max_relative_difference(got, ref);
}

/// How far N replicas may end the epoch from one device under `policy` (max_relative_difference
/// of the parameters and buffers). float32: its sums' order, 1e-5. A 16-bit policy adds what
/// that order does to the products' operands: a float32 value that lands on the other side of
/// a rounding boundary of the compute type rounds to the neighbouring 16-bit value, one unit
/// away (so a one-row step's gradient element moves by up to 2^-7 relative in bfloat16, 2^-10
/// in float16, where it flips), and the epoch's parameters stay within the type's unit
/// roundoff: 2^-8 for bfloat16, 2^-11 for float16.
inline double bound(strata::precision::Policy policy) {
  switch (policy.compute) {
    case strata::DType::bf16: return 0x1p-8;
    case strata::DType::f16: return 0x1p-11;
    default: return 1e-5;
  }
}

/// Every model's epoch (of `models`) under the strategy `get()` returns a reference to (one
/// for every model, or a new one each), against one device, both under the precision policy
/// `policy` (with the loss scale where it needs one, and `poison` on one replica); prints a line
/// each (naming `who`) and returns the failures.
template <class Get>
int check_models(const std::string& who, Get get, std::span<const Model> models = kModels,
                 strata::precision::Policy policy = strata::precision::float32, Poison poison = {}) {
  const strata::precision::Scope scope(policy);
  int failures = 0;
  for (const Model m : models) {
    auto& strategy = get();
    const int replicas = strategy.num_replicas_in_sync();
    bool server = false;
    if constexpr (requires { strategy.is_server(); }) server = strategy.is_server();
    std::string rank;
    if constexpr (requires { strategy.rank(); }) rank = "rank " + std::to_string(strategy.rank()) + ", ";
    const double diff =
        difference(m, train_epoch(strategy, m, poison), one_device_reference(m, replicas, poison), server);
    const bool ok = diff < bound(policy);
    failures += ok ? 0 : 1;
    const std::string poisoned_step =
        poison.replica < 0 ? "" : " (step " + std::to_string(poison.step) + " infinite on replica " +
                                      std::to_string(poison.replica) + ")";
    std::printf("%s %s%s: %s in %s%s, an epoch ending in 1 row for %d replicas: %s differ from one device's by %.3g "
                "(relative; bound %.3g)\n",
                ok ? "ok  " : "FAIL", rank.c_str(), who.c_str(), name(m), strata::precision::name_of(policy),
                poisoned_step.c_str(), replicas,
                m == Model::resnet || server ? "parameters" : "parameters and buffers", diff, bound(policy));
  }
  return failures;
}

/// The models whose products a 16-bit policy rounds (the CNN's first convolution and its
/// linear layers, the Transformer's linear layers; the ResNet's 3x3 convolutions go by
/// Winograd in float32).
inline constexpr Model kBf16Models[] = {Model::cnn, Model::transformer};

}  // namespace zero_rows

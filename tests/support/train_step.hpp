// The training step tests and benchmarks measure, the same under every strategy: each
// replica's cross-entropy summed over its rows and divided by the global batch, its gradients,
// and the optimizer's update through the replica context. Returns the global mean loss.
#pragma once

#include <utility>

#include <strata/strata.hpp>

namespace support {

template <strata::Strategy S, class Model, class Optimizer>
double train_step(S& strategy, Model& model, Optimizer& opt, const auto& batch) {
  auto losses = strategy.run(
      [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        strata::Tensor loss =
            strata::nn::cross_entropy(model(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
        opt.apply_gradients(ctx, strata::grad(opt.scale_loss(loss), model.parameters()));
        return loss;
      },
      batch);
  return strategy.reduce(strata::ReduceOp::Sum, losses).item();
}

/// Test-set accuracy of `model`, evaluated without recording gradients.
inline double accuracy(strata::nn::Module& model, const strata::data::TensorDataset& test) {
  strata::NoGradGuard no_grad;
  model.eval();
  std::int64_t correct = 0;
  for (const auto& b : strata::data::Pipeline(test).batch(1000)) correct += strata::count_correct(model(b.x), b.y);
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

}  // namespace support

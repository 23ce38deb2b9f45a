/// \file
/// One training step, the same under every strategy: each replica computes its loss scaled
/// by the global batch, differentiates it, and lets the optimizer aggregate the gradients
/// across replicas and update. Returns the global mean loss.
#pragma once

#include <strata/strata.hpp>

namespace fmnist {

template <strata::Strategy S, class Model, class Optimizer>
double train_step(S& strategy, Model& model, Optimizer& opt, const auto& batch) {
  auto losses = strategy.run(
      [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        auto loss = strata::nn::cross_entropy(model(b.x), b.y, strata::nn::Reduction::sum_over_global_batch,
                                              b.global_size);
        opt.apply_gradients(ctx, strata::grad(loss, model.parameters()));
        return loss;
      },
      batch);
  return strategy.reduce(strata::ReduceOp::Sum, losses).item();
}

}  // namespace fmnist

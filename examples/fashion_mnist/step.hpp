/// \file
/// One training step, the same under every strategy: each replica computes its loss scaled
/// by the global batch, differentiates it, and lets the optimizer aggregate the gradients
/// across replicas and update. Returns the global mean loss.
#pragma once

#include <chrono>
#include <utility>

#include <strata/observe/timeline.hpp>
#include <strata/strata.hpp>

namespace fmnist {

/// Where replica 0's step went, in milliseconds.
struct StepTimes {
  double forward_ms = 0, backward_ms = 0, apply_ms = 0;
};

template <strata::Strategy S, class Model, class Optimizer>
double train_step(S& strategy, Model& model, Optimizer& opt, const auto& batch, StepTimes* times = nullptr) {
  using Clock = std::chrono::steady_clock;
  auto losses = strategy.run(
      [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        const auto t0 = Clock::now();
        strata::Tensor loss;
        {
          strata::observe::ScopedEvent ev("forward", "compute");
          loss = strata::nn::cross_entropy(model(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
        }
        const auto t1 = Clock::now();
        strata::Gradients grads;
        {
          strata::observe::ScopedEvent ev("backward", "compute");
          grads = strata::grad(opt.scale_loss(loss), model.parameters());  // times the loss scale, if any
        }
        const auto t2 = Clock::now();
        opt.apply_gradients(ctx, std::move(grads));
        if (times && ctx.replica_id_in_sync_group() == 0) {
          const auto t3 = Clock::now();
          auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
          *times = {ms(t0, t1), ms(t1, t2), ms(t2, t3)};
        }
        return loss;
      },
      batch);
  return strategy.reduce(strata::ReduceOp::Sum, losses).item();
}

}  // namespace fmnist

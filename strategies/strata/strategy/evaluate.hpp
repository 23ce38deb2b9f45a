/// \file
/// evaluate(): runs a model over a dataset distributed by a strategy, without recording
/// gradients and in inference mode, into streaming metrics (metrics/): the loop a user would
/// write, once. Each replica updates the metrics with its own rows, and a metric's read sums
/// every replica and process, so the figures are those of the whole dataset, exactly, under
/// any strategy and any remainder policy (padding rows count nowhere).
///
/// @code
/// strata::metrics::Accuracy accuracy;
/// strata::metrics::Mean loss;
/// strata::evaluate(strategy, model, data::Pipeline(test).batch(256), accuracy,
///                  [&](const Tensor& logits, const data::Batch& b) {
///                    loss.update(nn::cross_entropy(logits, b.y, nn::Reduction::none), b);
///                  });
/// double acc = accuracy.result(strategy), mean_loss = loss.result(strategy);  // every process
/// @endcode
#pragma once

#include <concepts>
#include <utility>

#include <strata/autograd/grad_mode.hpp>
#include <strata/data/dataset.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/replicated.hpp>  // check_cross_replica
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

/// What evaluate() takes after the data: a metric (`m.update(output, batch)`, reset when
/// evaluation starts) or a function `f(output, batch)` called with each replica's output and
/// rows (`output` is the model's output for `batch.x`).
template <class U>
concept EvaluationUpdate =
    std::invocable<U&, const Tensor&, const data::Batch&> ||
    requires(U& u, const Tensor& out, const data::Batch& b) { u.update(out, b); };

namespace detail {
template <class U>
void start_evaluation(U& u) {
  if constexpr (requires { u.reset(); }) u.reset();
}
template <class U>
void evaluation_update(U& u, const Tensor& out, const data::Batch& b) {
  if constexpr (std::invocable<U&, const Tensor&, const data::Batch&>)
    u(out, b);
  else
    u.update(out, b);
}
}  // namespace detail

/// Runs `model` over every batch of `data` as `strategy` distributes it, each replica on its
/// rows, in inference mode (dropout off; the mode is restored after) and without a tape, and
/// passes each replica's output to `updates`. Every process calls it (under a parameter-server
/// strategy, the servers serve the epoch). Metrics among `updates` are reset first; read them
/// with `metric.result(strategy)` afterwards, on every process.
template <Strategy S, class Model, EvaluationUpdate... U>
void evaluate(S& strategy, Model& model, const data::Pipeline& data, U&&... updates) {
  detail::check_cross_replica("evaluate()");
  (detail::start_evaluation(updates), ...);
  struct Mode {  // inference mode for the evaluation, the caller's mode after, also on an error
    Model& m;
    bool was_training;
    ~Mode() { m.train(was_training); }
  } mode{model, model.is_training()};
  model.eval();
  for (auto& batch : strategy.distribute(data)) {
    strategy.run(
        [&](ReplicaContext&, const data::Batch& b) {
          NoGradGuard no_grad;
          const Tensor out = model(b.x);
          (detail::evaluation_update(updates, out, b), ...);
        },
        batch);
  }
}

}  // namespace strata

/// \file
/// The Strategy concept: what every distribution strategy offers, so that a training loop
/// written as `template <strata::Strategy S> void train(S&)` runs under any of them.
///
/// Synopsis (S a strategy, s an S):
///   s.num_replicas_in_sync()   -> int   replicas taking part in each step, all processes
///   s.is_chief()               -> bool  true on the process that writes checkpoints and logs
///   s.scope(factory)           -> the object factory() makes, with its variables placed by S
///   s.distribute(pipeline)     -> a range of per-step inputs for run()
///   s.run(fn, input)           -> PerReplica<R>: fn(ReplicaContext&, const Batch&) once per local replica
///   s.reduce(op, per_replica)  -> the reduction across every replica, equal on every process
/// A type opts in by specialising enable_strategy (semantics the compiler cannot check:
/// every process calls run/reduce in the same order).
#pragma once

#include <concepts>

#include <strata/collective/reduce_op.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Opt-in trait: specialise to true for a type that honours the Strategy semantics.
template <class S>
inline constexpr bool enable_strategy = false;

template <class S>
concept Strategy = enable_strategy<S> && requires(S& s, const S& cs, PerReplica<Tensor> pt, PerReplica<double> pd,
                                                  data::Pipeline p) {
  { cs.num_replicas_in_sync() } -> std::same_as<int>;
  { cs.is_chief() } -> std::same_as<bool>;
  { s.reduce(ReduceOp::Sum, pt) } -> std::same_as<Tensor>;
  { s.reduce(ReduceOp::Sum, pd) } -> std::same_as<double>;
  s.distribute(p);
  { S::name } -> std::convertible_to<const char*>;
};

}  // namespace strata

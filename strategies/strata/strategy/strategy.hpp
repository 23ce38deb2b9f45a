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
///   s.gather(per_replica)      -> every replica's tensor concatenated along axis 0, on every process
///   s.sum_across_processes(v)  -> adds a span of doubles across the job's processes (a metric's read)
/// A type opts in by specialising enable_strategy (semantics the compiler cannot check:
/// every process calls run/reduce in the same order).
#pragma once

#include <concepts>
#include <span>

#include <strata/collective/reduce_op.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Opt-in trait: specialise to true for a type that honours the Strategy semantics.
template <class S>
inline constexpr bool enable_strategy = false;

namespace detail {
/// Stand-ins for a user's factory and replica step, for the concept's checks.
struct ProbeVariables {
  int value = 0;
};
struct ProbeFactory {
  ProbeVariables operator()() const { return {}; }
};
struct ProbeStep {
  Tensor operator()(ReplicaContext&, const data::Batch&) const { return {}; }
};
}  // namespace detail

template <class S>
concept Strategy = enable_strategy<S> && requires(S& s, const S& cs, PerReplica<Tensor> pt, PerReplica<double> pd,
                                                  data::Pipeline p, const data::Batch& b, std::span<double> v) {
  { cs.num_replicas_in_sync() } -> std::same_as<int>;
  { cs.is_chief() } -> std::same_as<bool>;
  s.scope(detail::ProbeFactory{});
  s.distribute(p);
  { s.run(detail::ProbeStep{}, b) } -> std::same_as<PerReplica<Tensor>>;
  { s.reduce(ReduceOp::Sum, pt) } -> std::same_as<Tensor>;
  { s.reduce(ReduceOp::Sum, pd) } -> std::same_as<double>;
  { s.gather(pt) } -> std::same_as<Tensor>;
  s.sum_across_processes(v);
  { S::name } -> std::convertible_to<const char*>;
};

}  // namespace strata

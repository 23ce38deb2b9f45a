/// \file
/// The Collective concept: how replicas exchange data. A policy moves typed, contiguous
/// buffers between the `size()` ranks of a group; every rank calls the same collectives in
/// the same order (the opt-in trait `enable_collective` states that a type honours this).
///
/// Synopsis (c a policy, x/y spans of float, double, int32_t, int64_t, Half or BFloat16):
///   c.rank(), c.size()               this rank in [0, size), the group size
///   c.allreduce(x, op)               x = op over all ranks' x, in place (Half/BFloat16 accumulate in float)
///   c.allreduce(x_in, y, op)         y = op over all ranks' x_in (out of place)
///   c.broadcast(x, root)             x = root's x
///   c.allgather(x_in, y)             y = concatenation of every rank's x_in, in rank order (|y| = size * |x_in|)
///   c.reduce_scatter(x_in, y, op)    y = rank's share (|y| = |x_in| / size) of op over all ranks' x_in
///   c.barrier()                      returns once every rank has entered it
///   c.iallreduce(x, op) -> Work      starts an in-place allreduce; Work::wait() completes it
///   c.iallgather(x_in, y) -> Work    starts an allgather; x_in and y untouched until wait()
///   c.ireduce_scatter(x_in, y, op) -> Work   starts a reduce_scatter (not of 16-bit floats)
///   c.abort(reason)                  every pending and later call on every rank fails with `reason`
/// Errors: strata::collective_error (peer failure, abort, mismatch), strata::timeout_error
/// (a deadline passed: the message names the collective, its sequence number and the
/// ranks that did not arrive), strata::invalid_argument (misuse, e.g. uneven reduce_scatter).
#pragma once

#include <concepts>
#include <span>
#include <string>

#include <strata/collective/reduce_op.hpp>

namespace strata {

/// Opt-in trait: true for a type that honours the collective semantics.
template <class C>
inline constexpr bool enable_collective = false;

/// A handle to an asynchronous collective.
template <class W>
concept CollectiveWork = requires(W& w) {
  w.wait();
  { w.test() } -> std::same_as<bool>;
};

template <class C>
concept Collective = enable_collective<C> && requires(C& c, const C& cc, std::span<float> x, std::span<const float> in,
                                                      ReduceOp op, const std::string& why) {
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  c.allreduce(x, op);
  c.allreduce(in, x, op);
  c.broadcast(x, 0);
  c.allgather(in, x);
  c.reduce_scatter(in, x, op);
  c.barrier();
  { c.iallreduce(x, op) } -> CollectiveWork;
  { c.iallgather(in, x) } -> CollectiveWork;
  { c.ireduce_scatter(in, x, op) } -> CollectiveWork;
  c.abort(why);
  { C::name } -> std::convertible_to<const char*>;
};

}  // namespace strata

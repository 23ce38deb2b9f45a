/// \file
/// What the strategies with one replica per process share (OneDevice, MultiWorkerMirrored,
/// ParameterServer): running a step as that replica, starting every process from one rank's
/// parameters, and reducing a replica's value over the processes.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/reduce_op.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// step(ctx) as this process's one replica: a PerReplica of its result (nothing for void).
template <class R, class Step>
auto run_single_replica(ReplicaContext& ctx, Step&& step) {
  if constexpr (std::is_void_v<R>) {
    step(ctx);
  } else {
    PerReplica<R> out(1);
    out[0] = step(ctx);
    return out;
  }
}

/// Every tensor of `params` set to rank `root`'s values over collective `comm`.
template <class C>
void broadcast_parameters(C& comm, const std::vector<Tensor>& params, int root) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    STRATA_CHECK(p.is_contiguous(), "scope(): parameters must be contiguous to be broadcast");
    comm.broadcast_raw(p.raw_data(), static_cast<std::size_t>(p.numel()), p.dtype(), root);
  }
}

/// `bytes` set to rank `root`'s (its length first) over collective `comm`.
template <class C>
void broadcast_bytes(C& comm, std::vector<unsigned char>& bytes, int root) {
  std::int64_t n = static_cast<std::int64_t>(bytes.size());
  comm.broadcast_raw(&n, 1, DType::i64, root);
  bytes.resize(static_cast<std::size_t>(n));
  if (n > 0) comm.broadcast_raw(bytes.data(), bytes.size(), DType::u8, root);
}

/// The one replica's value of `v`, reduced over `comm`: the same on every rank.
template <class C>
Tensor allreduce_value(C& comm, ReduceOp op, const PerReplica<Tensor>& v) {
  STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
  Tensor t = v[0].contiguous().clone();
  comm.allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
  return t;
}
template <class C>
double allreduce_value(C& comm, ReduceOp op, const PerReplica<double>& v) {
  STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
  double x = v[0];
  comm.allreduce_raw(&x, &x, 1, DType::f64, op);
  return x;
}

}  // namespace strata::detail

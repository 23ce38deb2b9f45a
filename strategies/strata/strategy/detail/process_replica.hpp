/// \file
/// What the strategies with one replica per process share (OneDevice, MultiWorkerMirrored,
/// ParameterServer): running a step as that replica, starting every process from one rank's
/// parameters, and reducing a replica's value over the processes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/reduce_op.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/random.hpp>
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

/// Whether `mine` holds on every rank of `comm` (collective: one all-reduce of one word), so
/// that every rank takes the same branch: skip a step, or not.
template <class C>
bool on_every_rank(C& comm, bool mine) {
  std::int32_t word = mine ? 1 : 0;
  comm.allreduce_raw(&word, &word, 1, DType::i32, ReduceOp::Min);
  return word == 1;
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

/// The generators a model's layers own (Dropout's seeds) set to rank `root`'s over `comm`, so
/// that every process draws the chief's masks whatever its own default generator was.
template <class C, class M>
void broadcast_generators(C& comm, M& model, int root) {
  if constexpr (requires { model.generators(); }) {
    for (Generator* g : model.generators()) {
      const auto st = g->state();
      std::int64_t words[4];
      std::memcpy(words, st.data(), sizeof words);
      comm.broadcast_raw(words, 4, DType::i64, root);
      std::array<std::uint64_t, 4> got;
      std::memcpy(got.data(), words, sizeof words);
      g->set_state(got);
    }
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

/// The one replica's tensor of every process concatenated along axis 0, in rank order, on
/// every process of `comm`; axis 0 may differ between ranks, the other extents and dtype may not.
template <class C>
Tensor allgather_value(C& comm, const PerReplica<Tensor>& v) {
  STRATA_CHECK_EQ(v.size(), std::size_t{1}, "gather: a PerReplica from another strategy");
  const Tensor t = v[0].contiguous();
  STRATA_CHECK(t.defined() && t.ndim() >= 1, "gather: needs a tensor with an axis 0");
  std::int64_t row_numel = 1;
  for (int i = 1; i < t.ndim(); ++i) row_numel *= t.dim(i);
  // Each rank's [rows, row elements, dtype, ndim]: the layout must agree except for the rows.
  const std::int64_t mine[4] = {t.dim(0), row_numel, static_cast<std::int64_t>(t.dtype()), t.ndim()};
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> all(4 * n);
  comm.allgather_raw(mine, all.data(), 4, DType::i64);
  std::int64_t max_rows = 0, total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    STRATA_CHECK(all[4 * r + 1] == row_numel && all[4 * r + 2] == mine[2] && all[4 * r + 3] == mine[3], "gather: rank ",
                 r, " has ", all[4 * r + 1], " elements per row (dtype tag ", all[4 * r + 2], ", ", all[4 * r + 3],
                 " axes), rank ", comm.rank(), " ", row_numel, " (", mine[2], ", ", mine[3], ")");
    max_rows = std::max(max_rows, all[4 * r]);
    total += all[4 * r];
  }
  // Pad every rank's rows to the longest, gather the bytes, then close the gaps.
  const std::size_t row_bytes = static_cast<std::size_t>(row_numel) * size_of(t.dtype());
  std::vector<unsigned char> padded(static_cast<std::size_t>(max_rows) * row_bytes, 0), everyone(padded.size() * n);
  if (t.nbytes()) std::memcpy(padded.data(), t.raw_data(), t.nbytes());
  comm.allgather_raw(padded.data(), everyone.data(), padded.size(), DType::u8);
  Shape s = t.shape();
  s[0] = total;
  Tensor out = Tensor::empty(s, t.dtype());
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t bytes = static_cast<std::size_t>(all[4 * r]) * row_bytes;
    if (bytes) std::memcpy(dst, everyone.data() + r * padded.size(), bytes);
    dst += bytes;
  }
  return out;
}

}  // namespace strata::detail

/// \file
/// What a collective policy offers beyond the Collective concept, named: each capability is a
/// concept plus an opt-in trait (the trait states the semantics, the concept checks the
/// syntax), so that strategies constrain on a name, never probe a policy for a member.
///
///   RawCollective          allreduce_raw, broadcast_raw, allgather_raw, reduce_scatter_raw
///                          over (pointer, count, dtype): every policy
///   WireCompression        allreduce_sum16_raw: a sum of fp16/bf16 elements, each partial sum
///                          added in float32 (Mpi, Gloo, Nccl)
///   HostSharedMemory       shared_buffer, shared_peer, shared_sync: buffers the ranks of one
///                          host share, a peer's view of one, and a barrier through them;
///                          shares_host: whether the ranks share this host's memory (Mpi, Gloo)
///   DeviceCollective       device(): the CUDA device the rank's buffers live on;
///                          start_allreduce_raw, join_compute: collectives ordered on the
///                          device behind its compute stream, no host thread waiting (Nccl)
///   ThreadGroupCollective  the ranks are threads of one process: allreduce_or_share_raw (the
///                          reduction left in each rank's share), aborted(), options() (InProcess)
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include <strata/collective/collective.hpp>
#include <strata/collective/options.hpp>
#include <strata/collective/reduce_op.hpp>
#include <strata/tensor/dtype.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::collective {

/// Opt-in traits, one per capability: specialise to true beside the policy's definition.
template <class C>
inline constexpr bool enable_raw_collective = false;
template <class C>
inline constexpr bool enable_wire_compression = false;
template <class C>
inline constexpr bool enable_host_shared_memory = false;
template <class C>
inline constexpr bool enable_device_collective = false;
template <class C>
inline constexpr bool enable_thread_group = false;

/// The collectives over untyped buffers (`in == out` is in place; counts are elements, per
/// rank for allgather and reduce_scatter). allgather_raw is in place where `in` is this rank's
/// block of `out` (out + rank * n elements), as MPI_IN_PLACE and NCCL's in-place form are.
template <class C>
concept RawCollective = Collective<C> && enable_raw_collective<C> &&
                        requires(C& c, const void* in, void* out, std::size_t n, DType t, ReduceOp op) {
                          c.allreduce_raw(in, out, n, t, op);
                          c.broadcast_raw(out, n, t, 0);
                          c.allgather_raw(in, out, n, t);
                          c.reduce_scatter_raw(in, out, n, t, op);
                        };

/// A sum of 16-bit floats on the wire (gradient compression): `x` holds n fp16 or bf16 elements.
template <class C>
concept WireCompression = RawCollective<C> && enable_wire_compression<C> &&
                          requires(C& c, void* x, std::size_t n, DType t) { c.allreduce_sum16_raw(x, n, t); };

/// Buffers the ranks of one host share: shared_buffer(n, dtype) (collective; undefined where
/// the ranks do not all share this host), shared_peer(mine, rank) (that rank's buffer of the
/// same call), shared_sync(mine) (a barrier of the ranks through it), shares_host() (collective
/// on its first call: whether the ranks share this host's memory).
template <class C>
concept HostSharedMemory = RawCollective<C> && enable_host_shared_memory<C> &&
                           requires(C& c, const C& cc, std::int64_t n, DType t, const Tensor& mine) {
                             { c.shared_buffer(n, t) } -> std::same_as<Tensor>;
                             { cc.shared_peer(mine, 0) } -> std::same_as<Tensor>;
                             c.shared_sync(mine);
                             { c.shares_host() } -> std::same_as<bool>;
                           };

/// Buffers on a CUDA device: device() is its index; a strategy places the replica there.
/// start_allreduce_raw(x, n, dtype, op) queues an in-place all-reduce of device memory after
/// the work queued on the device's compute stream and returns at once; join_compute() makes
/// the compute stream wait (on the device) for every one started, under the deadline.
template <class C>
concept DeviceCollective = RawCollective<C> && enable_device_collective<C> &&
                           requires(C& c, const C& cc, void* x, std::size_t n, DType t, ReduceOp op) {
                             { cc.device() } -> std::convertible_to<int>;
                             c.start_allreduce_raw(x, n, t, op);
                             c.join_compute();
                           };

/// Ranks that are threads of one process: a replica reduces its buckets itself, and may leave
/// the reduction in each rank's share of a buffer (allreduce_or_share_raw).
template <class C>
concept ThreadGroupCollective =
    RawCollective<C> && enable_thread_group<C> &&
    requires(C& c, const C& cc, void* x, std::size_t n, DType t, ReduceOp op, bool (*share)()) {
      { c.allreduce_or_share_raw(x, n, t, op, share) } -> std::same_as<bool>;
      { cc.aborted() } -> std::same_as<bool>;
      { cc.options() } -> std::convertible_to<const Options&>;
    };

}  // namespace strata::collective

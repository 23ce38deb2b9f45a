/// \file
/// ps::Shards: the variables a ParameterServerStrategy holds, in the order scope() met them,
/// and their partitions (ps::plan_partitions). The same on every rank of the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <strata/strategy/parameter_server/placement.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::ps {

/// Message tags: a partition's reply is its id, its push kPushTag + id; kLearningRateTag,
/// kDoneTag, kRateTag, kSaveTag and kBatchTag are a worker's control messages, answered
/// (kRateTag, kSaveTag, kBatchTag) on kRateReplyTag, kSaveAckTag and kBatchReplyTag;
/// kWorkerLostTag is what a transport reports when a worker's connection dies, and
/// kWorkerJoinedTag when a worker that joined after the start is connected; kLookupTag
/// asks a server for rows of a remote table's block (a payload, as a push), answered on
/// kLookupReplyTag. A worker that joined asks each server for the epoch it joins at and the
/// current values with kCatchUpTag, answered on kCatchUpReplyTag and on each partition's
/// tag (Server::catch_up). MPI guarantees tags up to 32767.
inline constexpr int kPushTag = 1 << 14;
inline constexpr int kRateReplyTag = kPushTag - 1;
inline constexpr int kSaveAckTag = kPushTag - 2;
inline constexpr int kBatchReplyTag = kPushTag - 3;
inline constexpr int kLookupTag = kPushTag - 4;
inline constexpr int kLookupReplyTag = kPushTag - 5;
inline constexpr int kCatchUpReplyTag = kPushTag - 6;
inline constexpr int kLearningRateTag = 32700;
inline constexpr int kDoneTag = 32701;
inline constexpr int kRateTag = 32702;
inline constexpr int kWorkerLostTag = 32703;
inline constexpr int kSaveTag = 32704;
inline constexpr int kBatchTag = 32705;
inline constexpr int kWorkerJoinedTag = 32706;
inline constexpr int kCatchUpTag = 32707;
inline constexpr std::size_t kMaxPartitions = kCatchUpReplyTag;

struct Shards {
  std::vector<Tensor> variables;
  std::vector<Partition> partitions;                 ///< ordered by (variable, offset); the index is the id
  std::vector<std::vector<std::size_t>> of_variable;  ///< partition ids of each variable
  std::vector<std::int64_t> load;                    ///< bytes per server

  explicit Shards(int servers = 1) : load(static_cast<std::size_t>(servers), 0) {}

  /// Places `params` (new variables) on the servers; returns the ids of their partitions.
  std::vector<std::size_t> add(std::span<const Tensor> params, std::int64_t partition_bytes) {
    std::vector<VariableSize> sizes;
    for (const Tensor& p : params) {
      STRATA_CHECK(p.defined() && p.is_contiguous(), "ParameterServerStrategy::scope(): variables must be contiguous");
      STRATA_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, "ParameterServerStrategy::scope(): variables "
                   "must be float32 or float64, got ", name_of(p.dtype()));
      STRATA_CHECK(index_of(p) < 0, "ParameterServerStrategy::scope(): a variable created under scope() twice");
      sizes.push_back({p.numel(), size_of(p.dtype()), table_row_width(p)});
    }
    const std::vector<Partition> planned = plan_partitions(sizes, variables.size(), load, partition_bytes);
    STRATA_CHECK(partitions.size() + planned.size() <= kMaxPartitions, "ParameterServerStrategy: more than ",
                 kMaxPartitions, " partitions; raise partition_bytes");
    std::vector<std::size_t> ids;
    variables.insert(variables.end(), params.begin(), params.end());
    of_variable.resize(variables.size());
    for (const Partition& q : planned) {
      ids.push_back(partitions.size());
      of_variable[q.variable].push_back(partitions.size());
      partitions.push_back(q);
    }
    return ids;
  }

  /// Elements per row of `p` where it is a row-sparse table (marked by nn::Embedding with
  /// TableGradient::row_sparse, or a row-sparse lookup), in host memory; else 0.
  static std::int64_t table_row_width(const Tensor& p) {
    if (!p.impl()->ag.row_sparse || p.ndim() < 1 || p.device().kind != DeviceKind::cpu || p.dim(0) == 0) return 0;
    return p.numel() / p.dim(0);
  }

  /// The index of variable `p` (the same tensor), or -1.
  std::ptrdiff_t index_of(const Tensor& p) const noexcept {
    for (std::size_t i = 0; i < variables.size(); ++i)
      if (same_tensor(variables[i], p)) return static_cast<std::ptrdiff_t>(i);
    return -1;
  }
  std::size_t element_bytes(const Partition& q) const { return size_of(variables[q.variable].dtype()); }
  std::size_t bytes(const Partition& q) const { return static_cast<std::size_t>(q.count) * element_bytes(q); }
  std::size_t byte_offset(const Partition& q) const { return static_cast<std::size_t>(q.offset) * element_bytes(q); }
};

}  // namespace strata::ps

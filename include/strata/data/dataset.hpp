/// \file
/// TensorDataset: examples held in memory as two tensors with a shared first axis, and Batch,
/// what a data pipeline hands to a training step.
#pragma once

#include <cstdint>

#include <strata/tensor/tensor.hpp>

namespace strata::data {

/// Inputs x [N, ...] and labels y [N] (or [N, ...]).
struct TensorDataset {
  Tensor x, y;

  TensorDataset() = default;
  TensorDataset(Tensor xs, Tensor ys) : x(std::move(xs)), y(std::move(ys)) {
    STRATA_CHECK(x.defined() && y.defined() && x.ndim() >= 1 && y.ndim() >= 1, "TensorDataset needs x and y with a "
                 "first axis");
    STRATA_CHECK_EQ(x.dim(0), y.dim(0), "TensorDataset: inputs and labels differ in count");
    x = x.contiguous();
    y = y.contiguous();
  }
  std::int64_t size() const noexcept { return x.defined() ? x.dim(0) : 0; }
};

/// One step's examples for one replica.
struct Batch {
  Tensor x, y;
  std::int64_t size = 0;         ///< examples in this batch (this replica)
  std::int64_t global_size = 0;  ///< examples in this step across every replica
  std::int64_t epoch = 0;        ///< 0-based epoch this batch belongs to
  std::int64_t index = 0;        ///< 0-based step within the epoch
};

}  // namespace strata::data

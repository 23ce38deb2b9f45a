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

/// Rows [lo, hi) of `t` as a view (no copy; not differentiable: for input data).
inline Tensor slice_rows(const Tensor& t, std::int64_t lo, std::int64_t hi) {
  STRATA_CHECK(t.defined() && t.ndim() >= 1 && t.is_contiguous(), "slice_rows needs a contiguous tensor");
  STRATA_CHECK(0 <= lo && lo <= hi && hi <= t.dim(0), "slice_rows(", lo, ", ", hi, ") of ", t.dim(0), " rows");
  Shape s = t.shape();
  s[0] = hi - lo;
  const std::int64_t row = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  return ::strata::detail::make_view(t, s, contiguous_strides(s), t.impl()->offset() + lo * row);
}

/// One step's examples for one replica.
struct Batch {
  Tensor x, y;
  std::int64_t size = 0;         ///< rows in this batch (this replica), padding included
  std::int64_t padding = 0;      ///< trailing rows that are padding (label kPadLabel): Remainder::pad
  std::int64_t global_size = 0;  ///< examples in this step across every replica
  std::int64_t epoch = 0;        ///< 0-based epoch this batch belongs to
  std::int64_t index = 0;        ///< 0-based step within the epoch

  /// The same batch with its tensors on `device`.
  Batch to(Device device) const {
    Batch b = *this;
    if (x.defined()) b.x = x.to(device);
    if (y.defined()) b.y = y.to(device);
    return b;
  }
};

}  // namespace strata::data

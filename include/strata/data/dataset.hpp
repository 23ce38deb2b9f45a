/// \file
/// TensorDataset: examples held in memory as tensors with a shared first axis (inputs, and
/// labels if any), and Batch, what a data pipeline hands to a training step.
#pragma once

#include <concepts>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include <strata/tensor/tensor.hpp>

namespace strata::data {

/// The input tensors of a dataset with several (or without labels): TensorDataset(Inputs(x, z), y).
struct Inputs {
  std::vector<Tensor> tensors;

  template <class... T>
    requires(std::convertible_to<T, Tensor> && ...)
  explicit Inputs(Tensor first, T... more) : tensors{std::move(first), Tensor(std::move(more))...} {}
  explicit Inputs(std::vector<Tensor> all) : tensors(std::move(all)) {}
};

/// Examples held in memory: one or more input tensors and, optionally, labels, all with the
/// same first axis N (the examples).
struct TensorDataset {
  Tensor x;                        ///< the first input [N, ...]
  Tensor y;                        ///< the labels [N] (or [N, ...]); undefined for a dataset without labels
  std::vector<Tensor> more_inputs; ///< the inputs after the first, for a model with several (Batch::input)

  TensorDataset() = default;
  /// Inputs `xs` and labels `ys`.
  TensorDataset(Tensor xs, Tensor ys) : TensorDataset(Inputs(std::move(xs)), std::move(ys)) {
    STRATA_CHECK(y.defined(), "TensorDataset(x, y): the labels are undefined; for a dataset without labels use "
                 "TensorDataset(Inputs(x))");
  }
  /// Any number of inputs (at least one) and, optionally, labels.
  explicit TensorDataset(Inputs in, Tensor labels = Tensor()) : y(std::move(labels)) {
    std::vector<Tensor>& inputs = in.tensors;
    STRATA_CHECK(!inputs.empty(), "TensorDataset needs at least one input tensor");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      STRATA_CHECK(inputs[i].defined() && inputs[i].ndim() >= 1, "TensorDataset: input ", i,
                   " needs a first axis (the examples)");
      STRATA_CHECK_EQ(inputs[i].dim(0), inputs[0].dim(0), "TensorDataset: input ", i, " differs in count from input 0");
      inputs[i] = inputs[i].contiguous();
    }
    if (y.defined()) {
      STRATA_CHECK(y.ndim() >= 1, "TensorDataset: the labels need a first axis (the examples)");
      STRATA_CHECK_EQ(inputs[0].dim(0), y.dim(0), "TensorDataset: inputs and labels differ in count");
      y = y.contiguous();
    }
    x = std::move(inputs[0]);
    more_inputs.assign(std::make_move_iterator(inputs.begin() + 1), std::make_move_iterator(inputs.end()));
  }
  std::int64_t size() const noexcept { return x.defined() ? x.dim(0) : 0; }
  std::size_t num_inputs() const noexcept { return x.defined() ? 1 + more_inputs.size() : 0; }
  /// Input `i` (0: x), as Batch::input(i) reads a batch's.
  const Tensor& input(std::size_t i) const {
    STRATA_CHECK(i < num_inputs(), "TensorDataset::input(", i, "): the dataset has ", num_inputs(), " input(s)");
    return i == 0 ? x : more_inputs[i - 1];
  }
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
  Tensor x, y;                   ///< the first input's rows, and the labels' (undefined without labels)
  std::int64_t size = 0;         ///< rows in this batch (this replica), padding included
  std::int64_t padding = 0;      ///< trailing rows that are padding (label kPadLabel): Remainder::pad
  std::int64_t global_size = 0;  ///< examples in this step across every replica
  std::int64_t epoch = 0;        ///< 0-based epoch this batch belongs to
  std::int64_t index = 0;        ///< 0-based step within the epoch
  std::int64_t global_offset = 0;  ///< the first of these rows among every replica's rows of the step
  std::vector<Tensor> more_inputs;  ///< the rows of the dataset's inputs after the first (input(i))

  /// Input `i` of the dataset's inputs, these rows of it (input(0) is x).
  const Tensor& input(std::size_t i) const {
    STRATA_CHECK(i <= more_inputs.size(), "Batch::input(", i, "): the dataset has ", 1 + more_inputs.size(),
                 " input(s)");
    return i == 0 ? x : more_inputs[i - 1];
  }
  std::size_t num_inputs() const noexcept { return 1 + more_inputs.size(); }

  /// The same batch with its tensors on `device`.
  Batch to(Device device) const {
    Batch b = *this;
    if (x.defined()) b.x = x.to(device);
    if (y.defined()) b.y = y.to(device);
    for (Tensor& t : b.more_inputs) t = t.to(device);
    return b;
  }
};

}  // namespace strata::data

/// \file
/// Differentiable embedding lookup: rows of a table picked by integer indices, its gradient a
/// dense scatter-add of the output's gradient rows into the table's, or those rows themselves
/// (TableGradient::row_sparse; docs/sparse_design.md).
#pragma once

#include <cstdint>
#include <cstring>

#include <strata/autograd/tape.hpp>
#include <strata/tensor/device_kernels.hpp>  // require_host
#include <strata/tensor/tensor.hpp>

namespace strata {

/// The form of an embedding table's gradient.
enum class TableGradient {
  dense,       ///< a [V, D] gradient, zero where no index looked
  row_sparse,  ///< the looked-up rows only (Tensor::row_grad), duplicates combined
};

namespace ops::detail {

/// f(std::int32_t{}) or f(std::int64_t{}) for an index tensor's dtype.
template <class F>
decltype(auto) visit_index(DType t, const char* op, F&& f) {
  if (t == DType::i64) return f(std::int64_t{});
  if (t == DType::i32) return f(std::int32_t{});
  STRATA_THROW(::strata::invalid_argument, "strata.dtype", op, ": indices must be int32 or int64, got ", name_of(t));
}

inline void embedding_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& idx = n.saved[0];
  const std::int64_t D = n.in[0].dim(1);
  if (n.i[0] != 0) {  // row-sparse: the output's gradient rows are the table's
    strata::detail::visit_floating(n.in[0].dtype(), "embedding", [&](auto tag) {
      using T = decltype(tag);
      visit_index(idx.dtype(), "embedding", [&](auto itag) {
        using I = decltype(itag);
        autograd::add_grad_rows<T, I>(n.in[0], epoch, idx.numel(), D, idx.template data<I>(),
                                      autograd::grad_output(n).template data<T>());
      });
    });
    return;
  }
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  if (!s.accumulate) s.dst.fill_(0.0);
  strata::detail::visit_floating(s.dst.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    const T* g = autograd::grad_output(n).template data<T>();
    T* d = s.dst.template data<T>();
    visit_index(idx.dtype(), "embedding", [&](auto itag) {
      using I = decltype(itag);
      const I* ip = idx.template data<I>();
      for (std::int64_t r = 0, rows = idx.numel(); r < rows; ++r) {
        T* dr = d + static_cast<std::int64_t>(ip[r]) * D;
        const T* gr = g + r * D;
        for (std::int64_t c = 0; c < D; ++c) dr[c] += gr[c];
      }
    });
  });
}

}  // namespace ops::detail

/// The rows of `table` [V, D] at `indices` (int32 or int64, any shape): [..., D]. Every index
/// must lie in [0, V); the first one that does not is named. The table's gradient is dense,
/// or with TableGradient::row_sparse the rows looked up (a leaf table's; a computed table's
/// gradient stays dense), which marks the table as row-sparse for the optimizers.
inline Tensor embedding(const Tensor& table, const Tensor& indices, TableGradient grad = TableGradient::dense) {
  STRATA_CHECK(table.defined() && indices.defined(), "embedding: undefined operand");
  STRATA_CHECK(table.ndim() == 2, "embedding: the table must be [rows, width], got ", table.shape());
  require_host("embedding", table, indices);
  const std::int64_t V = table.dim(0), D = table.dim(1);
  const Tensor idx = indices.contiguous();
  Shape os = indices.shape();
  os.push_back(D);
  Tensor out = Tensor::empty(os, table.dtype());
  const Tensor tc = table.contiguous();
  ops::detail::visit_index(idx.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    const I* ip = idx.template data<I>();
    const auto esize = static_cast<std::int64_t>(size_of(table.dtype()));
    const char* src = static_cast<const char*>(tc.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (std::int64_t r = 0, rows = idx.numel(); r < rows; ++r) {
      const auto i = static_cast<std::int64_t>(ip[r]);
      STRATA_CHECK(i >= 0 && i < V, "embedding: index ", i, " at position ", r, " is out of range for a table of ", V,
                   " rows");
      std::memcpy(dst + r * D * esize, src + i * D * esize, static_cast<std::size_t>(D * esize));
    }
  });
  if (is_floating(table.dtype()))
    if (auto* n = autograd::record("embedding", &ops::detail::embedding_backward, out, table)) {
      n->saved[0] = idx;
      n->i[0] = grad == TableGradient::row_sparse;
      if (grad == TableGradient::row_sparse && table.is_leaf()) table.impl()->ag.row_sparse = true;
    }
  return out;
}

}  // namespace strata

/// \file
/// Differentiable embedding lookup: rows of a table picked by integer indices, its gradient a
/// dense scatter-add of the output's gradient rows into the table's, or those rows themselves
/// (TableGradient::row_sparse; docs/design/sparse_tables.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <strata/autograd/tape.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/row_source.hpp>
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

/// The order in which the device adds the gradient rows into the table's gradient: for each
/// distinct row, in increasing order, the positions that looked it up, in position order (the
/// CPU's order of additions), as [rows | starts | positions] (DeviceKernels::sum_rows).
template <class I>
std::vector<std::int64_t> row_sum_plan(std::int64_t n, const I* idx, std::int64_t& segments) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) order[static_cast<std::size_t>(r)] = r;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return idx[a] < idx[b]; });
  std::vector<std::int64_t> rows, starts;
  for (std::int64_t j = 0; j < n; ++j)
    if (j == 0 || idx[order[static_cast<std::size_t>(j)]] != idx[order[static_cast<std::size_t>(j - 1)]]) {
      rows.push_back(static_cast<std::int64_t>(idx[order[static_cast<std::size_t>(j)]]));
      starts.push_back(j);
    }
  starts.push_back(n);
  segments = static_cast<std::int64_t>(rows.size());
  std::vector<std::int64_t> plan;
  plan.reserve(rows.size() + starts.size() + order.size());
  plan.insert(plan.end(), rows.begin(), rows.end());
  plan.insert(plan.end(), starts.begin(), starts.end());
  plan.insert(plan.end(), order.begin(), order.end());
  return plan;
}

/// The dense gradient of a table on a device: zeroed (unless accumulating), then each looked-up
/// row's sum added by the plan. `idx` is the host's copy of the indices.
inline void embedding_backward_on_device(const autograd::GradSlot& s, const Tensor& idx, const Tensor& g) {
  if (!s.accumulate) Tensor(s.dst).fill_(0.0);
  std::int64_t segments = 0;
  const std::vector<std::int64_t> plan = visit_index(idx.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    return row_sum_plan<I>(idx.numel(), idx.template data<I>(), segments);
  });
  if (segments == 0) return;
  const Tensor d_plan = Tensor::empty({static_cast<std::int64_t>(plan.size())}, DType::i64, g.device());
  backend_of(g.device()).copy(d_plan.raw_data(), g.device(), plan.data(), Device::cpu(), plan.size() * sizeof(std::int64_t));
  device_kernels("embedding", g, s.dst)
      .sum_rows(g.device().index, g.dtype(), segments, s.dst.dim(1), static_cast<const std::int64_t*>(d_plan.raw_data()),
                g.raw_data(), s.dst.raw_data());
}

inline void embedding_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& idx = n.saved[0];
  const std::int64_t D = n.in[0].dim(1);
  if (on_device(n.in[0])) {
    if (auto s = autograd::grad_slot(n.in[0], epoch)) embedding_backward_on_device(s, idx, autograd::grad_output(n));
    return;
  }
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
  const std::int64_t V = table.dim(0), D = table.dim(1);
  // The indices on the host: checked there, and the plan of a device table's gradient.
  const Tensor idx = on_device(indices) ? indices.to(Device::cpu()) : indices.contiguous();
  Shape os = indices.shape();
  os.push_back(D);
  Tensor out = Tensor::empty(os, table.dtype(), table.device());
  const Tensor tc = table.contiguous();
  if (on_device(table)) {
    STRATA_CHECK(grad == TableGradient::dense, "embedding on ", table.device(),
                 ": row-sparse gradients are made on the CPU; ask for TableGradient::dense or keep the table on the "
                 "host");
    ops::detail::visit_index(idx.dtype(), "embedding", [&](auto itag) {
      using I = decltype(itag);
      const I* ip = idx.template data<I>();
      for (std::int64_t r = 0, rows = idx.numel(); r < rows; ++r)
        STRATA_CHECK(ip[r] >= 0 && static_cast<std::int64_t>(ip[r]) < V, "embedding: index ",
                     static_cast<std::int64_t>(ip[r]), " at position ", r, " is out of range for a table of ", V,
                     " rows");
    });
    const Tensor d_idx = on_device(indices) ? indices.contiguous() : idx.to(table.device());
    device_kernels("embedding", table, d_idx)
        .gather_rows(table.device().index, table.dtype(), d_idx.dtype(), d_idx.numel(), D, tc.raw_data(),
                     d_idx.raw_data(), out.raw_data());
  } else {
    require_host("embedding", indices);
  }
  if (!on_device(table)) ops::detail::visit_index(idx.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    const I* ip = idx.template data<I>();
    const auto esize = static_cast<std::int64_t>(size_of(table.dtype()));
    const char* src = static_cast<const char*>(tc.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    if (RowSource* source = table.impl()->ag.row_source) {  // the values live elsewhere: asked for by row
      std::vector<std::int64_t> wanted(static_cast<std::size_t>(idx.numel()));
      for (std::int64_t r = 0, rows = idx.numel(); r < rows; ++r) {
        const auto i = static_cast<std::int64_t>(ip[r]);
        STRATA_CHECK(i >= 0 && i < V, "embedding: index ", i, " at position ", r, " is out of range for a table of ", V,
                     " rows");
        wanted[static_cast<std::size_t>(r)] = i;
      }
      source->gather(table, wanted, dst);
      return;
    }
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

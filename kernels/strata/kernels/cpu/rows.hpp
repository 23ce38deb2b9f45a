/// \file
/// Row-sparse gradient kernels: combining duplicate rows (coalesce) and adding rows into a
/// dense [V, width] array (scatter_add_rows). Sums run in the order the rows come, so a
/// coalesced row is bit for bit the dense scatter-add's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace strata::kernels::cpu {

/// dst[index[j]] += rows[j] for j < n; dst is [V, width], row-major.
template <class T, class I>
void scatter_add_rows(std::int64_t n, std::int64_t width, const I* index, const T* rows, T* dst) {
  for (std::int64_t j = 0; j < n; ++j) {
    T* d = dst + static_cast<std::int64_t>(index[j]) * width;
    const T* r = rows + j * width;
    for (std::int64_t c = 0; c < width; ++c) d[c] += r[c];
  }
}

/// The distinct row numbers of index[0..n) in ascending order and, for each, the sum of its
/// rows in the order they come (index[j] names rows[j], `width` values each). `order` is
/// scratch; out_index and out_rows are resized. Returns the count of distinct rows.
template <class T, class I>
std::int64_t coalesce_rows(std::int64_t n, std::int64_t width, const I* index, const T* rows,
                           std::vector<std::pair<std::int64_t, std::int64_t>>& order,
                           std::vector<std::int64_t>& out_index, std::vector<T>& out_rows) {
  order.resize(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) order[static_cast<std::size_t>(j)] = {static_cast<std::int64_t>(index[j]), j};
  std::sort(order.begin(), order.end());  // by row, then by position: the sums keep the rows' order
  out_index.clear();
  for (std::int64_t j = 0; j < n; ++j)
    if (j == 0 || order[static_cast<std::size_t>(j)].first != order[static_cast<std::size_t>(j - 1)].first)
      out_index.push_back(order[static_cast<std::size_t>(j)].first);
  const auto k = static_cast<std::int64_t>(out_index.size());
  out_rows.resize(static_cast<std::size_t>(k * width));
  std::int64_t at = -1;
  for (std::int64_t j = 0; j < n; ++j) {
    const auto [row, from] = order[static_cast<std::size_t>(j)];
    const T* r = rows + from * width;
    if (j == 0 || row != order[static_cast<std::size_t>(j - 1)].first) {
      ++at;
      std::memcpy(out_rows.data() + at * width, r, static_cast<std::size_t>(width) * sizeof(T));
    } else {
      T* d = out_rows.data() + at * width;
      for (std::int64_t c = 0; c < width; ++c) d[c] += r[c];
    }
  }
  return k;
}

}  // namespace strata::kernels::cpu

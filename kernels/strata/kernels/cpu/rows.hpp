/// \file
/// Row-sparse gradient kernels: combining duplicate rows (coalesce) and adding rows into a
/// dense [V, width] array (scatter_add_rows). Sums run in the order the rows come, so a
/// coalesced row is bit for bit the dense scatter-add's.
#pragma once

#include <algorithm>
#include <cstdint>
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
/// rows in the order they come (index[j] names rows[j], `width` values each). `slot` is
/// scratch indexed by row number (grown as needed, every entry -1 between calls); out_index
/// and out_rows are resized. Returns the count of distinct rows. Linear in n, plus a sort of
/// the distinct rows.
template <class T, class I>
std::int64_t coalesce_rows(std::int64_t n, std::int64_t width, const I* index, const T* rows,
                           std::vector<std::int64_t>& slot, std::vector<std::int64_t>& out_index, std::vector<T>& out_rows) {
  out_index.clear();
  for (std::int64_t j = 0; j < n; ++j) {
    const auto r = static_cast<std::size_t>(index[j]);
    if (r >= slot.size()) slot.resize(r + 1, -1);
    if (slot[r] < 0) {
      slot[r] = 0;
      out_index.push_back(static_cast<std::int64_t>(r));
    }
  }
  std::sort(out_index.begin(), out_index.end());
  const auto k = static_cast<std::int64_t>(out_index.size());
  for (std::int64_t i = 0; i < k; ++i) slot[static_cast<std::size_t>(out_index[static_cast<std::size_t>(i)])] = i;
  out_rows.assign(static_cast<std::size_t>(k * width), T(0));  // 0 + r + ...: the dense scatter's sums
  for (std::int64_t j = 0; j < n; ++j) {
    T* d = out_rows.data() + slot[static_cast<std::size_t>(index[j])] * width;
    const T* r = rows + j * width;
    for (std::int64_t c = 0; c < width; ++c) d[c] += r[c];
  }
  for (std::int64_t i = 0; i < k; ++i) slot[static_cast<std::size_t>(out_index[static_cast<std::size_t>(i)])] = -1;
  return k;
}

}  // namespace strata::kernels::cpu

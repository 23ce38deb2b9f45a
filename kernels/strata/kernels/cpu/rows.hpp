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

/// Coalescing, in phases so that the sums go straight where the caller wants them, from one
/// run of rows or several: note_rows() collects the distinct row numbers of index[0..n)
/// (call it per run), number_rows() sorts them and numbers them in `slot` (scratch indexed by
/// row number, grown as needed, every entry -1 between coalescings), add_rows() adds each
/// run's rows into their row's sum (index[j] names rows[j], `width` values each; runs in the
/// order the sums are to take), and clear_rows() resets `slot`. distinct_rows() and
/// sum_rows() are the one-run forms. Linear in the rows, plus a sort of the distinct ones.
template <class I>
void note_rows(std::int64_t n, const I* index, std::vector<std::int64_t>& slot, std::vector<std::int64_t>& out_index) {
  for (std::int64_t j = 0; j < n; ++j) {
    const auto r = static_cast<std::size_t>(index[j]);
    if (r >= slot.size()) slot.resize(r + 1, -1);
    if (slot[r] < 0) {
      slot[r] = 0;
      out_index.push_back(static_cast<std::int64_t>(r));
    }
  }
}

/// Sorts the noted rows and numbers them in `slot`; returns how many there are.
inline std::int64_t number_rows(std::vector<std::int64_t>& slot, std::vector<std::int64_t>& out_index) {
  std::sort(out_index.begin(), out_index.end());
  const auto k = static_cast<std::int64_t>(out_index.size());
  for (std::int64_t i = 0; i < k; ++i) slot[static_cast<std::size_t>(out_index[static_cast<std::size_t>(i)])] = i;
  return k;
}

/// out[slot[index[j]]] += rows[j] for j < n (out: the numbered rows' sums, `width` each).
template <class T, class I>
void add_rows(std::int64_t n, std::int64_t width, const I* index, const T* rows, const std::vector<std::int64_t>& slot,
              T* out) {
  for (std::int64_t j = 0; j < n; ++j) {
    T* d = out + slot[static_cast<std::size_t>(index[j])] * width;
    const T* r = rows + j * width;
    for (std::int64_t c = 0; c < width; ++c) d[c] += r[c];
  }
}

/// Every noted row's `slot` entry back to -1.
inline void clear_rows(std::vector<std::int64_t>& slot, const std::vector<std::int64_t>& out_index) {
  for (std::int64_t r : out_index) slot[static_cast<std::size_t>(r)] = -1;
}

/// One run: its distinct row numbers in `out_index`, ascending, numbered in `slot`.
template <class I>
std::int64_t distinct_rows(std::int64_t n, const I* index, std::vector<std::int64_t>& slot,
                           std::vector<std::int64_t>& out_index) {
  out_index.clear();
  note_rows(n, index, slot, out_index);
  return number_rows(slot, out_index);
}

/// One run: out[slot[index[j]]] = 0 + rows[j] + ... for the rows distinct_rows() found
/// (`out` holds their count * width): the dense scatter's sums, bit for bit; `slot` cleared.
template <class T, class I>
void sum_rows(std::int64_t n, std::int64_t width, const I* index, const T* rows, std::vector<std::int64_t>& slot,
              const std::vector<std::int64_t>& out_index, T* out) {
  std::fill_n(out, static_cast<std::int64_t>(out_index.size()) * width, T(0));
  add_rows(n, width, index, rows, slot, out);
  clear_rows(slot, out_index);
}

}  // namespace strata::kernels::cpu

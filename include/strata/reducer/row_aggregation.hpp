/// \file
/// RowAggregation: a row-sparse table's gradient summed across ranks by its density
/// (docs/design/sparse_tables.md, "Aggregation by density").
///
/// Each rank holds its table gradient as rows (indices, values) or dense. One all-gather of
/// two words per rank — how many rows, and whether dense — tells every rank the same thing,
/// so all take the same way:
///
///   gather  every rank's rows, padded to the most any rank holds, all-gathered in one message
///           and combined in rank order (duplicates summed, rows ascending): the table's
///           gradient is then those rows on every rank, the same bits everywhere;
///   dense   the rows scattered into the table's bucket, which is all-reduced whole.
///
/// The gather is taken where every rank holds rows and the gathered messages are no larger
/// than `ratio` times the dense table (RowAggregationRule); bench/bench_row_aggregation.cpp
/// measures where the two cost the same.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <strata/kernels/cpu/rows.hpp>  // note_rows, number_rows, add_rows
#include <strata/runtime/process.hpp>   // env
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// Which way a row-sparse table's gradient is summed: by the byte rule, or always one way
/// (STRATA_ROW_AGGREGATION=auto|gather|dense; `gather` still goes dense where a rank's
/// gradient is dense).
struct RowAggregationRule {
  enum class Way : std::uint8_t { automatic, gather, dense };
  Way way = Way::automatic;
  /// Gather while the gathered messages are at most `ratio` × the dense table's bytes. The
  /// two ways cost the same near 0.5 (bench/bench_row_aggregation.cpp, 2 ranks, tables of
  /// 16 k to 1 M rows × 64 floats: gather 1.4× to 2.2× faster at 0.13, 0.97× to 1.13× at
  /// 0.52, 0.5× at 2.06): the gather copies and combines each byte it receives, the dense way
  /// streams the table.
  double ratio = 0.5;

  static RowAggregationRule from_env() {
    RowAggregationRule r;
    if (const char* v = runtime::detail::env("STRATA_ROW_AGGREGATION")) {
      const std::string_view s(v);
      STRATA_CHECK(s == "auto" || s == "gather" || s == "dense", "STRATA_ROW_AGGREGATION=", s,
                   ": expected auto, gather or dense");
      r.way = s == "gather" ? Way::gather : s == "dense" ? Way::dense : Way::automatic;
    }
    return r;
  }

  /// Whether `ranks` ranks each sending `most` rows of `width` elements of `elem` bytes (with
  /// an 8-byte index each) gather fewer bytes than `ratio` × a dense [rows, width] table.
  bool gathers(int ranks, std::int64_t most, std::int64_t rows, std::int64_t width, std::size_t elem) const noexcept {
    if (way != Way::automatic) return way == Way::gather;
    const double gathered = double(ranks) * double(most) * (8.0 + double(width) * double(elem));
    return gathered <= ratio * double(rows) * double(width) * double(elem);
  }
};

/// What one table's aggregation moved, summed over steps.
struct RowAggregationStats {
  std::int64_t gathered = 0;     ///< aggregations that gathered rows
  std::int64_t dense = 0;        ///< aggregations that all-reduced the table whole
  double bytes_sent = 0;         ///< this rank's payload: its padded message, or the dense table
  double touched_bytes = 0;      ///< the lower bound: this rank's rows and indices, unpadded
  RowAggregationStats& operator+=(const RowAggregationStats& o) noexcept {
    gathered += o.gathered;
    dense += o.dense;
    bytes_sent += o.bytes_sent;
    touched_bytes += o.touched_bytes;
    return *this;
  }
};

/// One rank's side of the row aggregation of its tables (scratch kept between steps).
class RowAggregation {
 public:
  /// The ranks' row counts for `table`: whether every one holds rows, and the most rows any holds.
  struct Census {
    bool all_rows = true;
    std::int64_t most = 0;
  };

  /// One all-gather of two words per rank (collective: every rank calls it, tables in one order).
  template <class C>
  Census census(C& comm, const Tensor& table) {
    const auto& ag = table.impl()->ag;
    const bool rows = ag.grad_index.defined();
    const std::int64_t mine[2] = {rows ? ag.grad_index.numel() : 0, rows ? 0 : 1};
    const auto n = static_cast<std::size_t>(comm.size());
    counts_.resize(2 * n);
    comm.allgather_raw(mine, counts_.data(), 2, DType::i64);
    Census c;
    for (std::size_t q = 0; q < n; ++q) {
      c.most = std::max(c.most, counts_[2 * q]);
      c.all_rows = c.all_rows && counts_[2 * q + 1] == 0;
    }
    return c;
  }

  /// Rows of one rank: `count` row numbers, then their values (the table's dtype).
  struct RowPart {
    std::int64_t count = 0;
    const std::int64_t* index = nullptr;
    const void* rows = nullptr;
  };

  /// The sum of `parts` rows of `table`'s gradient, part(0) .. part(parts - 1) in that order
  /// (so the bits do not depend on who combines): row numbers ascending and distinct.
  template <class Part>
  RowGrad combine(const Tensor& table, std::size_t parts, Part&& part) {
    const std::int64_t width = table.dim(0) > 0 ? table.numel() / table.dim(0) : 0;
    RowGrad out;
    visit_floating(table.dtype(), "row aggregation", [&](auto tag) {
      using T = decltype(tag);
      out_index_.clear();
      for (std::size_t q = 0; q < parts; ++q) {
        const RowPart pq = part(q);
        kernels::cpu::note_rows(pq.count, pq.index, slot_, out_index_);
      }
      const std::int64_t kept = kernels::cpu::number_rows(slot_, out_index_);
      Shape rs = table.shape();
      rs[0] = kept;
      out.indices = Tensor::empty({kept}, DType::i64);
      out.rows = Tensor::empty(rs, table.dtype());
      std::copy_n(out_index_.data(), kept, out.indices.data<std::int64_t>());
      T* sums = out.rows.template data<T>();
      std::fill_n(sums, kept * width, T(0));
      for (std::size_t q = 0; q < parts; ++q) {  // straight from each part: no copy of the rows
        const RowPart pq = part(q);
        kernels::cpu::add_rows<T>(pq.count, width, pq.index, static_cast<const T*>(pq.rows), slot_, sums);
      }
      kernels::cpu::clear_rows(slot_, out_index_);
    });
    return out;
  }

  /// Gathers every rank's rows of `table` (census() first, all ranks holding rows) and leaves
  /// their sum, in rank order, as the table's row gradient. Returns the bytes this rank sent.
  template <class C>
  std::size_t gather(C& comm, const Tensor& table, const Census& c) {
    auto& ag = table.impl()->ag;
    const std::int64_t width = table.dim(0) > 0 ? table.numel() / table.dim(0) : 0;
    const std::size_t es = size_of(table.dtype());
    const auto n = static_cast<std::size_t>(comm.size());
    // One message per rank: `most` indices (int64), then `most` rows, in whole words.
    const auto most = static_cast<std::size_t>(c.most);
    const std::size_t row_words = (most * static_cast<std::size_t>(width) * es + 7) / 8;
    const std::size_t words = most + row_words;
    send_.assign(words, -1);
    const auto k = static_cast<std::size_t>(ag.grad_index.numel());
    std::copy_n(ag.grad_index.data<std::int64_t>(), k, send_.data());
    if (k > 0) std::memcpy(send_.data() + most, ag.grad_rows.raw_data(), k * static_cast<std::size_t>(width) * es);
    recv_.resize(words * n);
    comm.allgather_raw(send_.data(), recv_.data(), words, DType::i64);

    const RowGrad sum = combine(table, n, [&](std::size_t q) {
      const std::int64_t* msg = recv_.data() + q * words;
      return RowPart{counts_[2 * q], msg, msg + most};
    });
    ag.grad_index = sum.indices;
    ag.grad_rows = sum.rows;
    return words * 8 + sizeof(std::int64_t) * 2;
  }

 private:
  std::vector<std::int64_t> counts_, send_, recv_, out_index_;
  std::vector<std::int64_t> slot_;  // note_rows' scratch by row number (-1 between calls)
};

}  // namespace strata::detail

/// \file
/// A replica's rows of a step's global batch: views of the rows, with the batch's place among
/// the step's (Batch::global_offset) and its padding rows.
#pragma once

#include <algorithm>
#include <cstdint>

#include <strata/data/dataset.hpp>
#include <strata/data/pipeline.hpp>  // split_begin

namespace strata::detail {

/// Rows [lo, hi) of a global batch, as one replica's batch (views, no copy).
inline data::Batch batch_rows(const data::Batch& global, std::int64_t lo, std::int64_t hi) {
  data::Batch b;
  b.x = data::slice_rows(global.x, lo, hi);
  if (global.y.defined()) b.y = data::slice_rows(global.y, lo, hi);
  for (const Tensor& t : global.more_inputs) b.more_inputs.push_back(data::slice_rows(t, lo, hi));
  b.size = hi - lo;
  const std::int64_t real_end = global.size - global.padding;  // padding rows come last
  b.padding = hi - std::max(lo, std::min(hi, real_end));
  b.global_size = global.global_size;
  b.epoch = global.epoch;
  b.index = global.index;
  b.global_offset = global.global_offset + lo;
  return b;
}

/// Local replica r's rows of a global batch split evenly between n replicas.
inline data::Batch replica_rows(const data::Batch& global, int r, int n) {
  return batch_rows(global, data::detail::split_begin(global.size, r, n), data::detail::split_begin(global.size, r + 1, n));
}

}  // namespace strata::detail

/// \file
/// RowSource: where embedding() reads a table's rows when the table's values live elsewhere
/// (ParameterServerOptions::remote_tables: on the parameter servers). A strategy attaches one
/// to a table (Tensor's autograd state, `ag.row_source`) for as long as the table's own memory
/// does not hold its values; a lookup then asks the source for the rows it reads, and nothing
/// else reads the table's memory.
#pragma once

#include <cstdint>
#include <span>

namespace strata {

class Tensor;

class RowSource {
 public:
  /// Writes row `rows[r]` of `table` ([V, ...], contiguous) to `out` + r * (one row's bytes),
  /// for every r; the rows are in range (checked by the caller) and may repeat.
  virtual void gather(const Tensor& table, std::span<const std::int64_t> rows, void* out) = 0;

 protected:
  ~RowSource() = default;
};

}  // namespace strata

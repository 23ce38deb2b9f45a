/// \file
/// Where each variable of a ParameterServerStrategy lives: a variable of at least
/// `partition_bytes` is cut into one contiguous element range per server (MXNet's big-array
/// slicing, TF's partitioners); smaller ones go whole, largest first, to the server holding
/// the fewest bytes so far. A row-sparse table is cut by rows into one block per server,
/// whatever its size: its rows are what workers push and pull (docs/design/sparse_tables.md). Every
/// rank computes the same plan from the same variables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::ps {

/// One contiguous piece of a variable, held by one server.
struct Partition {
  std::size_t variable = 0;  ///< index among the strategy's variables
  std::int64_t offset = 0;   ///< first element
  std::int64_t count = 0;    ///< elements
  int server = 0;            ///< index among the servers (0..S-1)
  std::int64_t row_width = 0;  ///< a row-sparse table's block: elements per row (offset and count are whole rows)
};

/// A variable as placement sees it.
struct VariableSize {
  std::int64_t numel = 0;
  std::size_t element_bytes = 4;
  std::int64_t row_width = 0;  ///< > 0: a row-sparse table of numel / row_width rows
  std::int64_t bytes() const noexcept { return numel * static_cast<std::int64_t>(element_bytes); }
};

/// Places variables `first_variable, first_variable + 1, ...` (sizes `vars`) on `servers`
/// servers whose bytes so far are `load` (updated). Partitions come out ordered by
/// (variable, offset).
inline std::vector<Partition> plan_partitions(std::span<const VariableSize> vars, std::size_t first_variable,
                                              std::vector<std::int64_t>& load, std::int64_t partition_bytes) {
  const int servers = static_cast<int>(load.size());
  STRATA_CHECK(servers >= 1, "plan_partitions: needs at least one server");
  STRATA_CHECK(partition_bytes >= 1, "partition_bytes must be positive, got ", partition_bytes);
  std::vector<std::vector<Partition>> per_var(vars.size());
  std::vector<std::size_t> whole;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::int64_t n = vars[i].numel;
    if (const std::int64_t w = vars[i].row_width; w > 0) {  // a table: a block of rows per server
      const std::int64_t rows = n / w;
      for (int s = 0; s < servers; ++s) {
        const std::int64_t lo = rows * s / servers, hi = rows * (s + 1) / servers;
        if (hi == lo && !(s == 0 && rows == 0)) continue;  // fewer rows than servers
        per_var[i].push_back({first_variable + i, lo * w, (hi - lo) * w, s, w});
        load[static_cast<std::size_t>(s)] += (hi - lo) * w * static_cast<std::int64_t>(vars[i].element_bytes);
      }
    } else if (vars[i].bytes() >= partition_bytes && n >= servers && servers > 1) {
      for (int s = 0; s < servers; ++s) {
        const std::int64_t lo = n * s / servers, hi = n * (s + 1) / servers;
        per_var[i].push_back({first_variable + i, lo, hi - lo, s});
        load[static_cast<std::size_t>(s)] += (hi - lo) * static_cast<std::int64_t>(vars[i].element_bytes);
      }
    } else {
      whole.push_back(i);
    }
  }
  // Largest first onto the least-loaded server (ties: the lower index), so the plan is the
  // same on every rank.
  std::stable_sort(whole.begin(), whole.end(), [&](std::size_t a, std::size_t b) { return vars[a].bytes() > vars[b].bytes(); });
  for (std::size_t i : whole) {
    const auto s = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    per_var[i].push_back({first_variable + i, 0, vars[i].numel, static_cast<int>(s)});
    load[s] += vars[i].bytes();
  }
  std::vector<Partition> out;
  for (auto& v : per_var) out.insert(out.end(), v.begin(), v.end());
  return out;
}

}  // namespace strata::ps

/// \file
/// RowSplit: how MirroredStrategy splits each global batch's rows among its replicas. The
/// measured balance, detail::RowBalance, is in detail/row_balance.hpp.
#pragma once

#include <strata/runtime/process.hpp>  // env

namespace strata {

/// How a global batch's rows are divided between the replica threads (MirroredOptions::rows).
enum class RowSplit {
  even,      ///< the same count each (to within a row): bit-reproducible runs
  measured,  ///< in proportion to each replica's measured speed (detail::RowBalance)
};

/// STRATA_ROW_SPLIT: even (the default) or measured.
inline RowSplit default_row_split() {
  return runtime::detail::env_either("STRATA_ROW_SPLIT", "even", "measured", "strata.strategy") ? RowSplit::measured
                                                                                                : RowSplit::even;
}

}  // namespace strata

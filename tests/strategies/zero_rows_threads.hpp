// zero_rows.hpp's epoch under the strategies whose replicas are threads of one process.
#pragma once

#include <array>
#include <vector>

#include "strategies/zero_rows.hpp"

namespace zero_rows {

/// How far the epoch under MirroredStrategy (whole gradients, then sharded with the update
/// split) and under CentralStorageStrategy on `n` replica threads ends from `ref`, each (with
/// `poison` on one replica).
inline std::array<double, 3> thread_strategy_differences(Model m, int n, const std::vector<std::vector<float>>& ref,
                                                         Poison poison = {}) {
  strata::MirroredStrategy whole(n);
  strata::MirroredStrategy sharded(n, {.split_update = strata::UpdateSplit::on, .gradients = strata::GradientLayout::sharded});
  strata::CentralStorageStrategy central(n);
  return {difference(m, train_epoch(whole, m, poison), ref), difference(m, train_epoch(sharded, m, poison), ref),
          difference(m, train_epoch(central, m, poison), ref)};
}

}  // namespace zero_rows

/// \file
/// UpdateSplit: how the mirrored strategies apply the optimizer's update to their replicas'
/// copies. The mechanism, detail::SplitUpdate, is in detail/split_update.hpp.
#pragma once

#include <string_view>

#include <strata/runtime/process.hpp>  // env
#include <strata/support/check.hpp>

namespace strata {

/// How MirroredStrategy and MultiWorkerMirroredStrategy apply the optimizer's update to
/// their replicas' copies (MirroredOptions::split_update, MultiWorkerOptions::split_update).
enum class UpdateSplit {
  off,       ///< every replica updates all of its copy
  on,        ///< each replica updates its share and writes it into the other copies (SplitUpdate)
  measured,  ///< step by step, whichever of the two the update phase measurably costs less
};

/// STRATA_SPLIT_UPDATE: 0 (off), 1 (on) or auto (measured, the default).
inline UpdateSplit default_split_update() {
  const char* v = runtime::detail::env("STRATA_SPLIT_UPDATE");
  if (v == nullptr || std::string_view(v) == "auto") return UpdateSplit::measured;
  if (std::string_view(v) == "0") return UpdateSplit::off;
  if (std::string_view(v) == "1") return UpdateSplit::on;
  STRATA_THROW(::strata::invalid_argument, "strata.strategy", "STRATA_SPLIT_UPDATE='", v,
               "' is none of 0, 1, auto");
}

}  // namespace strata

/// \file
/// The trainers' --timeline: every rank records its events from the start (`start`), and at
/// the end one Chrome trace is written (`write`; https://ui.perfetto.dev). Alone, straight to
/// the file; in a job of several processes the chief gathers every rank's events through the
/// strategy, on its own clock (strata::write_job_timeline). The parameter-server roles run no
/// common step, so there each rank writes `path.rank<r>` for tools/merge_timeline.py.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <strata/strata.hpp>

namespace trainer {

/// Starts this process's timeline where `path` is set.
inline void start_timeline(const std::string& path) {
  if (!path.empty()) strata::observe::Timeline::instance().start(strata::runtime::detect_process().rank);
}

/// Writes the timeline to `path` where it is set. Collective in a job of several processes.
template <strata::Strategy S>
void write_timeline(S& strategy, const std::string& path) {
  if (path.empty()) return;
  auto& timeline = strata::observe::Timeline::instance();
  const auto p = strata::runtime::detect_process();
  if (p.world_size == 1) {
    timeline.write(path);
  } else if constexpr (std::string_view(S::name) == "parameter_server") {
    timeline.write(path + ".rank" + std::to_string(p.rank));
    if (strategy.is_chief()) std::printf("timeline: one file per rank, %s.rank<r>\n", path.c_str());
  } else {
    strata::write_job_timeline(strategy, path);
    if (strategy.is_chief())
      std::printf("timeline: %s (%d ranks, on rank 0's clock; offset of this rank %lld ns)\n", path.c_str(),
                  p.world_size, static_cast<long long>(timeline.clock_offset()));
  }
}

}  // namespace trainer

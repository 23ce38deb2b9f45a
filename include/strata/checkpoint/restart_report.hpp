/// \file
/// RestartReport: what a restart redid, for a loop that checkpoints. The chief writes the last
/// step it reached beside the checkpoints (one small file, "reached_step", rewritten each
/// step); a run started again by `strata-run --max-restarts` (STRATA_RESTART_COUNT > 0) reads
/// it before it resumes and says how many steps it redoes: those past the checkpoint it
/// resumes from (docs/checkpoints.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <strata/support/environment.hpp>

namespace strata::checkpoint {

class RestartReport {
 public:
  /// `dir`: the checkpoint directory (empty: no checkpoints, nothing reported); `chief`: this
  /// process writes and reports.
  RestartReport(std::string dir, bool chief) : chief_(chief && !dir.empty()) {
    if (!chief_) return;
    path_ = (std::filesystem::path(dir) / "reached_step").string();
    if (const char* r = environment::get("STRATA_RESTART_COUNT")) restart_ = std::atoi(r);
    std::ifstream in(path_);
    if (!(in >> previous_)) previous_ = -1;
  }

  /// Called once the run knows where it resumes (`step`: the checkpoint's step, 0 for none).
  void resumed_at(std::int64_t step) const {
    if (!chief_ || restart_ <= 0) return;
    std::printf("restart %d: resumed from step %lld; the last run reached step %lld: %lld steps redone\n", restart_,
                static_cast<long long>(step), static_cast<long long>(previous_),
                static_cast<long long>(previous_ > step ? previous_ - step : 0));
    std::fflush(stdout);
  }

  /// Called after each training step.
  void reached(std::int64_t step) const {
    if (!chief_) return;
    std::ofstream out(path_, std::ios::trunc);
    out << step << '\n';
  }

 private:
  bool chief_ = false;
  std::string path_;
  int restart_ = 0;
  std::int64_t previous_ = -1;
};

}  // namespace strata::checkpoint

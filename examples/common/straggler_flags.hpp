/// \file
/// The trainers' straggler scores (strata::StragglerScores): the flags, the sentence the
/// progress output prints when a rank is markedly slow, and the JSON of the last window.
#pragma once

#include <cmath>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <strata/strata.hpp>

namespace trainer {

struct StragglerFlags {
  int straggler_every = 50;          ///< steps a window of straggler scores (0: off)
  double straggler_threshold = 1.5;  ///< a rank's multiple of the others' median that names it
};

inline void add_straggler_flags(CLI::App& app, StragglerFlags& f) {
  app.add_option("--straggler-every", f.straggler_every, "score every rank's compute time a step over windows of this "
                 "many steps and name one markedly slower than the others (0: off; docs/observability.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--straggler-threshold", f.straggler_threshold, "a rank is named when its compute time a step is this "
                 "multiple of the other ranks' median or more")
      ->check(CLI::Range(1.01, 1000.0))
      ->capture_default_str();
}

inline strata::StragglerScores make_straggler_scores(const StragglerFlags& f) {
  return strata::StragglerScores({.every = f.straggler_every, .threshold = f.straggler_threshold});
}

/// The last window's scores as JSON (null before the first window, or when off):
/// {"every", "step", "busy_ms": [...], "vs_fastest": [...], "vs_own_best": [...],
///  "slowest_rank", "slowest_vs_others", "named"}.
inline nlohmann::ordered_json straggler_json(const strata::StragglerScores& scores) {
  const auto& r = scores.last_report();
  if (!r) return nullptr;
  auto rounded = [](double v) {
    return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(std::round(v * 1e3) / 1e3);
  };
  auto list = [&](const std::vector<double>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (double x : v) a.push_back(rounded(x));
    return a;
  };
  return {{"every", scores.every()},          {"step", r->step},
          {"busy_ms", list(r->busy_ms)},      {"vs_fastest", list(r->vs_fastest)},
          {"vs_own_best", list(r->vs_own_best)}, {"slowest_rank", r->slowest},
          {"slowest_vs_others", rounded(r->slowest_vs_others)}, {"named", r->markedly_slow}};
}

}  // namespace trainer

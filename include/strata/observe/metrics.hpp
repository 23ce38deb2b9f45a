/// \file
/// MetricsCsv: a training run's per-step figures as CSV, for tools/plot_metrics.py and any
/// spreadsheet — loss, examples/s, and where the step's time went (data, forward, backward,
/// apply_gradients, the all-reduces and the part of them the step waited for), the compute
/// time and, where a window of straggler scores closed, the slowest rank and its score
/// (strata::StragglerScores), plus one row per evaluation. Written by one process (the chief); a field not measured is left empty.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <strata/support/check.hpp>

namespace strata::observe {

/// One step's figures (times in milliseconds; NaN: not measured).
struct StepMetrics {
  std::int64_t step = 0;
  int epoch = 0;
  double loss = NAN, examples_per_s = NAN;
  double data_ms = NAN, forward_ms = NAN, backward_ms = NAN, apply_ms = NAN;
  double allreduce_ms = NAN, allreduce_exposed_ms = NAN;
  double compute_ms = NAN;  ///< the step's busy time: its wall time less its waits on other ranks
  double slowest_rank = NAN, slowest_vs_others = NAN;  ///< where a straggler window closed
};

class MetricsCsv {
 public:
  /// Opens `path` (replacing it) and writes the header; step() keeps every `every`-th step.
  explicit MetricsCsv(const std::string& path, int every = 1) : every_(every), path_(path) {
    STRATA_REQUIRE(every >= 1, invalid_argument, "strata.observe.metrics", "every must be at least 1, got ", every);
    f_ = std::fopen(path.c_str(), "w");
    STRATA_REQUIRE(f_ != nullptr, invalid_argument, "strata.observe.metrics", "cannot write ", path);
    std::fputs("step,epoch,loss,examples_per_s,data_ms,forward_ms,backward_ms,apply_ms,allreduce_ms,"
               "allreduce_exposed_ms,compute_ms,slowest_rank,slowest_vs_others,test_accuracy\n", f_);
  }
  ~MetricsCsv() {
    if (f_) std::fclose(f_);
  }
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  void step(const StepMetrics& m) {
    if (m.step % every_ != 0) return;
    std::fprintf(f_, "%lld,%d", static_cast<long long>(m.step), m.epoch);
    for (double v : {m.loss, m.examples_per_s, m.data_ms, m.forward_ms, m.backward_ms, m.apply_ms, m.allreduce_ms,
                     m.allreduce_exposed_ms, m.compute_ms, m.slowest_rank, m.slowest_vs_others})
      field(v);
    std::fputs(",\n", f_);
  }
  /// A row for an evaluation at the end of `epoch` (1-based), after `step` steps.
  void evaluation(std::int64_t step, int epoch, double test_accuracy) {
    std::fprintf(f_, "%lld,%d,,,,,,,,,,,,%.6f\n", static_cast<long long>(step), epoch, test_accuracy);
    std::fflush(f_);
  }
  void flush() {
    STRATA_REQUIRE(std::fflush(f_) == 0, invalid_argument, "strata.observe.metrics", "writing ", path_, " failed");
  }

 private:
  void field(double v) {
    if (std::isnan(v))
      std::fputs(",", f_);
    else
      std::fprintf(f_, ",%.6g", v);
  }
  int every_;
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace strata::observe

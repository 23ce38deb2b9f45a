/// \file
/// What the trainer reports besides training: the progress line, the per-step metrics CSV,
/// the timeline of every rank, the straggler scores, throughput (over the whole run, and steady
/// after the warm-up steps), the gradient all-reduce time, and the run's results as one JSON line (nlohmann-json:
/// a figure not measured is null, never NaN).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <strata/kernels/cpu/blas_core.hpp>
#include <strata/kernels/cpu/gemm.hpp>  // gemm_kernel
#include <strata/observe/metrics.hpp>
#include <strata/observe/progress.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/strata.hpp>

#include "../common/straggler_flags.hpp"
#include "../common/timeline.hpp"
#include "options.hpp"
#include "step.hpp"

namespace fmnist {

template <strata::Strategy S>
class RunReport {
 public:
  using Clock = std::chrono::steady_clock;
  /// Steps the steady-state figure leaves out: the allocator's caches fill and the replica
  /// threads start in the first steps (PyTorch's side of the benchmarks leaves out as many).
  static constexpr std::int64_t kWarmupSteps = 20;

  RunReport(S& strategy, const Options& o)
      : s_(strategy), o_(o), progress_(!o.quiet && strategy.is_chief()), stragglers_(trainer::make_straggler_scores(o)) {
    if (!o.metrics_path.empty() && strategy.is_chief()) metrics_.emplace(o.metrics_path, o.metrics_every);
    trainer::start_timeline(o.timeline_path);
  }

  StepTimes* times() { return &times_; }
  void begin_epoch() {
    stragglers_.restart();  // the evaluation before it is no step's compute
    epoch_from_ = data_from_ = Clock::now();
    epoch_examples_ = epoch_steps_ = 0;
  }
  /// The data of the next step is here (the time since the last step went to the input).
  void data_ready() {
    step_from_ = Clock::now();
    strata::observe::Timeline::instance().record("data", "input", data_from_, step_from_);
  }

  /// Step `pos_step` (of the whole job), the `batch`-th of epoch `epoch` (0-based) of
  /// `batches`, over `examples` rows, has ended with the global mean `loss`.
  void step(std::int64_t pos_step, int epoch, std::int64_t batch, std::int64_t batches, std::int64_t examples, double loss) {
    const strata::observe::StragglerReport* window = stragglers_.step(s_);  // collective every K steps
    if (window) {
      progress_.set_note(window->sentence());
      if (window->markedly_slow) progress_.message("step " + std::to_string(pos_step) + ": " + window->sentence());
    }
    last_loss_ = loss;
    ++steps_;
    examples_ += examples;
    if (steps_ == kWarmupSteps) steady_from_ = Clock::now();
    else if (steps_ > kWarmupSteps) steady_examples_ += examples;
    epoch_examples_ += examples;
    ++epoch_steps_;
    const auto now = Clock::now();
    // The rate and the time left from what this run trained in this epoch: the examples
    // counted (a last batch holds fewer), the steps timed (a resumed epoch began before).
    const double secs = std::chrono::duration<double>(now - epoch_from_).count();
    progress_.update(epoch + 1, o_.epochs, batch, batches, loss, static_cast<double>(epoch_examples_) / secs,
                     secs / static_cast<double>(epoch_steps_) * static_cast<double>(batches * (o_.epochs - epoch) - batch));
    if (metrics_) {
      strata::observe::StepMetrics m{.step = pos_step, .epoch = epoch + 1, .loss = loss,
                                     .examples_per_s = static_cast<double>(examples) / seconds(data_from_, now),
                                     .data_ms = 1e3 * seconds(data_from_, step_from_), .forward_ms = times_.forward_ms,
                                     .backward_ms = times_.backward_ms, .apply_ms = times_.apply_ms};
      m.compute_ms = stragglers_.last_busy_ms();
      if (window) {
        m.slowest_rank = window->slowest;
        m.slowest_vs_others = window->slowest_vs_others;
      }
      if constexpr (requires { s_.gradient_stats(); }) {
        const strata::GradientStats st = s_.gradient_stats();
        m.allreduce_ms = 1e3 * (st.reduce_seconds - stats_before_.reduce_seconds);
        m.allreduce_exposed_ms = 1e3 * (st.exposed_seconds - stats_before_.exposed_seconds);
        stats_before_ = st;
      }
      metrics_->step(m);
    }
    data_from_ = Clock::now();
  }

  void end_epoch() {
    const auto t1 = Clock::now();
    train_seconds_ += seconds(epoch_from_, t1);
    if (steady_from_) steady_seconds_ += seconds(std::max(epoch_from_, *steady_from_), t1);
  }

  void evaluation(std::int64_t pos_step, int epoch, double accuracy) {
    accuracy_ = accuracy;
    if (metrics_) metrics_->evaluation(pos_step, epoch + 1, accuracy);
    if (s_.is_chief()) std::printf("epoch %d/%d  test accuracy %.2f %%\n", epoch + 1, o_.epochs, 100.0 * accuracy);
  }

  /// Writes the metrics and the timeline, and prints the JSON line on the chief. Collective
  /// where the strategy's figures are (the timeline gathered, the asynchronous job's rate).
  void finish() {
    if (metrics_) metrics_->flush();
    trainer::write_timeline(s_, o_.timeline_path);
    double rate = train_seconds_ > 0 ? static_cast<double>(examples_) / train_seconds_ : 0;
    double steady = steady_examples_ > 0 && steady_seconds_ > 0 ? static_cast<double>(steady_examples_) / steady_seconds_ : NAN;
    if constexpr (requires { s_.job_examples_per_s(1.0); }) {  // asynchronous workers count their own examples
      rate = s_.job_examples_per_s(rate);
      const double job = s_.job_examples_per_s(std::isnan(steady) ? 0.0 : steady);
      steady = job > 0 ? job : NAN;
    }
    double allreduce_ms = NAN, hidden = NAN;
    if constexpr (requires { s_.gradient_stats(); }) {
      const strata::GradientStats st = s_.gradient_stats();
      if (st.steps > 0) {
        allreduce_ms = 1e3 * st.reduce_seconds / static_cast<double>(st.steps);
        hidden = st.hidden_share();
      }
    }
    if (!s_.is_chief()) return;
    progress_.end_line();
    auto figure = [](double v, int digits) {  // rounded to `digits` decimals; null where not measured
      const double scale = std::pow(10.0, digits);
      return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(std::round(v * scale) / scale);
    };
    const int n = s_.num_replicas_in_sync();
    const nlohmann::ordered_json line = {
        {"model", o_.model}, {"strategy", S::name}, {"replicas", n}, {"epochs", o_.epochs}, {"seed", o_.seed},
        {"batch", o_.batch}, {"global_batch", trainer::global_batch_of(o_, n)}, {"lr", o_.lr}, {"momentum", o_.momentum_or_default()},
        {"steps", steps_}, {"final_loss", figure(last_loss_, 6)}, {"test_accuracy", figure(accuracy_, 4)},
        {"examples_per_s", figure(rate, 1)}, {"steady_examples_per_s", figure(steady, 1)},
        {"allreduce_ms_per_step", figure(allreduce_ms, 4)}, {"allreduce_hidden", figure(hidden, 3)},
        {"blas_kernels", strata::kernels::cpu::blas_core().used}, {"gemm_kernel", strata::kernels::cpu::gemm_kernel().name},
        {"precision", strata::precision::name_of(strata::precision::current())},
        {"stragglers", trainer::straggler_json(stragglers_)}};
    std::printf("%s\n", line.dump().c_str());
  }

 private:
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

  S& s_;
  const Options& o_;
  strata::observe::Progress progress_;
  strata::StragglerScores stragglers_;
  std::optional<strata::observe::MetricsCsv> metrics_;
  StepTimes times_;
  strata::GradientStats stats_before_{};
  Clock::time_point epoch_from_, data_from_, step_from_;
  std::optional<Clock::time_point> steady_from_;  // the end of this run's warm-up steps
  double train_seconds_ = 0, steady_seconds_ = 0, last_loss_ = NAN, accuracy_ = NAN;
  std::int64_t epoch_examples_ = 0, epoch_steps_ = 0;  // this run's, in the current epoch
  std::int64_t steps_ = 0, examples_ = 0, steady_examples_ = 0;
};

}  // namespace fmnist

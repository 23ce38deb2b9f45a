/// \file
/// The Fashion-MNIST training loop, written once as a template over the strategy.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

#include <strata/observe/metrics.hpp>
#include <strata/observe/progress.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/strategy/job_timeline.hpp>
#include <strata/runtime/process.hpp>
#include <strata/testing/fault.hpp>

#include "models.hpp"
#include "step.hpp"

namespace fmnist {

struct Config {
  std::string model = "mlp";
  int epochs = 1;
  std::uint64_t seed = 0;
  std::int64_t batch = 64;  ///< per replica
  double lr = 0.05;
  double momentum = 0.9;
  std::string data_dir = strata::data::default_fashion_mnist_dir();
  std::int64_t max_steps = -1;  ///< stop each epoch after this many steps (-1: whole epoch)
  bool evaluate = true;
  bool progress = true;
  std::string checkpoint_dir;           ///< empty: no checkpoints; else resume from the newest there
  std::int64_t checkpoint_every = 0;    ///< also save every this many steps (0: at the end only)
  std::string metrics_path;             ///< empty: none; else the chief's per-step CSV
  int metrics_every = 1;                ///< a CSV row every this many steps
  std::string timeline_path;            ///< empty: none; else a Chrome trace of the run, all ranks merged
};

struct Report {
  double test_accuracy = 0;
  double examples_per_s = 0;         ///< over every step of the run (wall time)
  double steady_examples_per_s = NAN;  ///< over the steps after the first kWarmupSteps (wall time); NaN if none
  double final_loss = 0;
  std::int64_t steps = 0;
  std::vector<double> losses;          ///< the global mean loss of every step
  std::vector<double> epoch_accuracy;  ///< test accuracy after each epoch
  double allreduce_ms_per_step = NAN;  ///< gradient all-reduce time per step (mirrored strategies)
  double allreduce_hidden = NAN;       ///< the share of it hidden behind backward
};

/// Steps the steady-state figure leaves out: the allocator's caches fill and the replica
/// threads start in the first steps (PyTorch's side of the benchmarks leaves out as many).
inline constexpr std::int64_t kWarmupSteps = 20;

/// Test-set accuracy of `model`, evaluated without recording gradients.
inline double evaluate(strata::nn::Module& model, const strata::data::TensorDataset& test) {
  strata::NoGradGuard no_grad;
  model.eval();
  std::int64_t correct = 0;
  strata::data::Pipeline p = strata::data::Pipeline(test).batch(1000);
  const strata::Device device = model.parameters().front().device();  // the input follows the variables
  for (const auto& b : p) correct += strata::count_correct(model(b.x.to(device)), b.y);
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

/// What a strategy without checkpoint support gets (never constructed: the flag is refused).
struct NoCheckpoints {
  void save(const strata::checkpoint::TrainingPosition&) {}
};

inline double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Writes the timeline: alone, straight to `path`; in a job of several processes, the chief
/// gathers every rank's events through the strategy, on its own clock, into `path`
/// (strata::write_job_timeline: no shared file system needed). The parameter-server roles do
/// not run a common step, so there each rank writes `path.rank<r>` for tools/merge_timeline.py.
template <strata::Strategy S>
void write_timeline(S& strategy, const std::string& path) {
  auto& timeline = strata::observe::Timeline::instance();
  const auto p = strata::runtime::detect_process();
  if (p.world_size == 1) {
    timeline.write(path);
    return;
  }
  if constexpr (std::string_view(S::name) == "parameter_server") {
    timeline.write(path + ".rank" + std::to_string(p.rank));
    if (strategy.is_chief()) std::printf("timeline: one file per rank, %s.rank<r>\n", path.c_str());
  } else {
    strata::write_job_timeline(strategy, path);
    if (strategy.is_chief())
      std::printf("timeline: %s (%d ranks, on rank 0's clock; offset of this rank %lld ns)\n", path.c_str(),
                  p.world_size, static_cast<long long>(timeline.clock_offset()));
  }
}

/// This process's rank in its job (0 when alone), for fault injection.
inline int process_rank() {
  static const int rank = strata::runtime::detect_process().rank;
  return rank;
}

/// Trains cfg.model on Fashion-MNIST under `strategy`; the same code for every strategy.
template <strata::Strategy S>
Report train(S& strategy, const Config& cfg) {
  using Clock = std::chrono::steady_clock;
  strata::manual_seed(cfg.seed);
  auto model = strategy.scope([&] { return make_model(cfg.model); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(model.parameters(), cfg.lr, {.momentum = cfg.momentum}); });
  const std::int64_t global_batch = cfg.batch * strategy.num_replicas_in_sync();
  auto pipeline = strata::data::Pipeline(strata::data::fashion_mnist_train(cfg.data_dir)).shuffle(cfg.seed).batch(global_batch);
  if (cfg.max_steps >= 0) pipeline = pipeline.take(cfg.max_steps);
  // Checkpoints: resume from the newest complete one, then save every N steps and at the end.
  strata::checkpoint::TrainingPosition pos;
  using Checkpoints = std::conditional_t<strata::checkpoints_supported<S>,
                                         strata::TrainingCheckpoints<S, decltype(model), decltype(opt)>, NoCheckpoints>;
  std::optional<Checkpoints> checkpoints;
  if (!cfg.checkpoint_dir.empty()) {
    if constexpr (strata::checkpoints_supported<S>) {
      checkpoints.emplace(strategy, model, opt, cfg.checkpoint_dir);
      if (auto at = checkpoints->restore()) {
        pos = *at;
        if (strategy.is_chief())
          std::printf("resumed from step %lld (epoch %lld, batch %lld) in %s\n", static_cast<long long>(pos.step),
                      static_cast<long long>(pos.epoch), static_cast<long long>(pos.batch), cfg.checkpoint_dir.c_str());
      }
    } else {
      throw strata::invalid_argument(std::string("[strata.example] --checkpoint-dir is not supported with --strategy ") +
                                     S::name + " yet");
    }
  }
  pipeline.set_position(pos.epoch, pos.batch);
  auto data = strategy.distribute(pipeline);
  const strata::data::TensorDataset test = cfg.evaluate ? strata::data::fashion_mnist_test(cfg.data_dir)
                                                        : strata::data::TensorDataset();
  Report report;
  report.losses.reserve(static_cast<std::size_t>(pipeline.num_batches() * cfg.epochs));
  strata::observe::Progress progress(cfg.progress && strategy.is_chief());
  // Observability: the chief's metrics CSV, every rank's timeline (merged at the end).
  std::optional<strata::observe::MetricsCsv> metrics;
  if (!cfg.metrics_path.empty() && strategy.is_chief()) metrics.emplace(cfg.metrics_path, cfg.metrics_every);
  if (!cfg.timeline_path.empty()) strata::observe::Timeline::instance().start(process_rank());
  StepTimes times;
  strata::GradientStats stats_before{};
  double train_seconds = 0, steady_seconds = 0;
  std::int64_t examples = 0, steady_examples = 0;
  std::optional<Clock::time_point> steady_from;  // the end of this run's warm-up steps
  for (int epoch = static_cast<int>(pos.epoch); epoch < cfg.epochs; ++epoch) {
    const auto t0 = Clock::now();
    std::int64_t step = epoch == pos.epoch ? pos.batch : 0;  // batches of this epoch done
    auto data_from = Clock::now();
    for (auto& batch : data) {
      const auto step_from = Clock::now();
      strata::observe::Timeline::instance().record("data", "input", data_from, step_from);
      const double loss = train_step(strategy, model, opt, batch, &times);
      report.losses.push_back(loss);
      examples += batch.global_size;
      const auto run_steps = static_cast<std::int64_t>(report.losses.size());  // this run's steps so far
      if (run_steps == kWarmupSteps) steady_from = Clock::now();
      else if (run_steps > kWarmupSteps) steady_examples += batch.global_size;
      ++step;
      ++pos.step;
      if (checkpoints && cfg.checkpoint_every > 0 && pos.step % cfg.checkpoint_every == 0) {
        const bool epoch_done = step == data.num_batches();
        checkpoints->save({pos.step, epoch + (epoch_done ? 1 : 0), epoch_done ? 0 : step});
      }
      STRATA_FAULT_POINT(process_rank(), pos.step, "after_step");  // test builds only (strata/testing/fault.hpp)
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      const double rate = static_cast<double>(step * global_batch) / secs;
      const double eta = secs / static_cast<double>(step) *
                         static_cast<double>(data.num_batches() * (cfg.epochs - epoch) - step);
      progress.update(epoch + 1, cfg.epochs, step, data.num_batches(), loss, rate, eta);
      if (metrics) {
        strata::observe::StepMetrics m{.step = pos.step, .epoch = epoch + 1, .loss = loss,
                                       .examples_per_s = static_cast<double>(batch.global_size) /
                                                         std::chrono::duration<double>(Clock::now() - data_from).count(),
                                       .data_ms = ms_between(data_from, step_from), .forward_ms = times.forward_ms,
                                       .backward_ms = times.backward_ms, .apply_ms = times.apply_ms};
        if constexpr (requires { strategy.gradient_stats(); }) {
          const strata::GradientStats st = strategy.gradient_stats();
          m.allreduce_ms = 1e3 * (st.reduce_seconds - stats_before.reduce_seconds);
          m.allreduce_exposed_ms = 1e3 * (st.exposed_seconds - stats_before.exposed_seconds);
          stats_before = st;
        }
        metrics->step(m);
      }
      data_from = Clock::now();
    }
    const auto t1 = Clock::now();
    train_seconds += std::chrono::duration<double>(t1 - t0).count();
    if (steady_from) steady_seconds += std::chrono::duration<double>(t1 - std::max(t0, *steady_from)).count();
    if (cfg.evaluate) {
      report.epoch_accuracy.push_back(evaluate(model, test));
      if (metrics) metrics->evaluation(pos.step, epoch + 1, report.epoch_accuracy.back());
      if (strategy.is_chief())
        std::printf("epoch %d/%d  test accuracy %.2f %%\n", epoch + 1, cfg.epochs, 100.0 * report.epoch_accuracy.back());
    }
  }
  if (checkpoints) checkpoints->save({pos.step, cfg.epochs, 0});
  if (metrics) metrics->flush();
  if (!cfg.timeline_path.empty()) write_timeline(strategy, cfg.timeline_path);
  report.steps = static_cast<std::int64_t>(report.losses.size());
  report.final_loss = report.losses.empty() ? NAN : report.losses.back();
  report.test_accuracy = report.epoch_accuracy.empty() ? NAN : report.epoch_accuracy.back();
  report.examples_per_s = train_seconds > 0 ? static_cast<double>(examples) / train_seconds : 0;
  if (steady_examples > 0 && steady_seconds > 0)
    report.steady_examples_per_s = static_cast<double>(steady_examples) / steady_seconds;
  if constexpr (requires { strategy.job_examples_per_s(1.0); }) {  // asynchronous workers count their own examples
    report.examples_per_s = strategy.job_examples_per_s(report.examples_per_s);
    const double mine = std::isnan(report.steady_examples_per_s) ? 0.0 : report.steady_examples_per_s;
    const double job = strategy.job_examples_per_s(mine);  // a collective: every rank calls it
    report.steady_examples_per_s = job > 0 ? job : NAN;
  }
  if constexpr (requires { strategy.gradient_stats(); }) {
    const strata::GradientStats st = strategy.gradient_stats();
    if (st.steps > 0) {
      report.allreduce_ms_per_step = 1e3 * st.reduce_seconds / static_cast<double>(st.steps);
      report.allreduce_hidden = st.hidden_share();
    }
  }
  return report;
}

}  // namespace fmnist

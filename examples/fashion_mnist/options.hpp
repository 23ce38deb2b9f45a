/// \file
/// The trainer's flags: what each means, its default and its allowed values, declared once
/// with CLI11 (which also writes --help), then the checks that span several flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include <strata/strata.hpp>

#include "../common/run_flags.hpp"
#include "../common/straggler_flags.hpp"
#include "../common/strategy_flags.hpp"

namespace fmnist {

struct Options : trainer::StrategyFlags, trainer::RunFlags, trainer::StragglerFlags {
  std::string model = "mlp";
  int epochs = 1;
  std::optional<double> momentum;  ///< 0.9, or 0.7 under an asynchronous parameter server
  int threads = 1;
  std::int64_t steps_per_epoch = -1;  ///< -1: the whole epoch
  bool no_eval = false;

  std::string metrics_path, timeline_path;
  int metrics_every = 1;

  Options() {
    batch = 64;
    lr = 0.05;
    data_dir = strata::data::default_fashion_mnist_dir();
  }

  /// Asynchrony adds momentum of its own: with 2 workers, one epoch of the MLP reaches the
  /// one-device accuracy at 0.7, not at 0.9 (docs/parameter_server.md, "Async and momentum").
  double momentum_or_default() const {
    return momentum.value_or(strategy == "parameter_server" && mode == "async" ? 0.7 : 0.9);
  }
};

/// Parses argv into `o`. Returns -1 to go on, or the exit status after --help or a bad flag
/// (CLI11 has printed what is wrong).
inline int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"Trains the reference MLP, CNN or ResNet on Fashion-MNIST under any strategy; prints a progress line and "
               "the test accuracy per epoch, then one JSON line with the run's results.",
               "fashion_mnist"};
  app.add_option("--model", o.model, "the reference model")->check(CLI::IsMember({"mlp", "cnn", "resnet", "resnet_sync"}))->capture_default_str();
  app.add_option("--epochs", o.epochs)->capture_default_str();
  trainer::add_run_flags(app, o, {.steps = "stop after this many optimizer steps in all (-1: every epoch's)",
                                  .batch = "images",
                                  .lr = "SGD's learning rate, for the global batch",
                                  .data = "the Fashion-MNIST IDX files"});
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "end each epoch after this many steps (-1: all)");
  app.add_option("--momentum", o.momentum, "0.9, or 0.7 under --strategy parameter_server --mode async");
  app.add_option("--threads", o.threads, "BLAS threads")->capture_default_str();
  app.add_flag("--no-eval", o.no_eval, "skip the test-set evaluation");
  trainer::add_strategy_flags(app, o, "cpu or cuda:N (one_device, or central_storage with replica r on cuda:N+r; cuda needs fashion_mnist_cuda)");
  app.add_option("--metrics", o.metrics_path, "the chief's per-step figures as CSV (tools/plot_metrics.py)");
  app.add_option("--metrics-every", o.metrics_every)->capture_default_str();
  app.add_option("--timeline", o.timeline_path, "a Chrome trace of every rank (https://ui.perfetto.dev)");
  trainer::add_straggler_flags(app, o);
  try {
    app.parse(argc, argv);
    auto at_least = [](const char* flag, auto v, decltype(v) lo) {
      if (v < lo) throw CLI::ValidationError(flag, "must be at least " + std::to_string(lo) + ", got " + std::to_string(v));
    };
    at_least("--epochs", o.epochs, 1);
    at_least("--threads", o.threads, 1);
    at_least("--metrics-every", o.metrics_every, 1);
    if (o.steps_per_epoch < -1 || o.steps_per_epoch == 0)
      throw CLI::ValidationError("--steps-per-epoch", "must be at least 1 (or -1: all), got " +
                                 std::to_string(o.steps_per_epoch));
    if (o.momentum && !(*o.momentum >= 0)) throw CLI::ValidationError("--momentum", "must be non-negative");
    trainer::check_strategy_flags(app, o);
    trainer::check_run_flags(app, o, o.strategy == "parameter_server" && o.mode == "async");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace fmnist

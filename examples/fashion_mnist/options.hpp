/// \file
/// The trainer's flags: what each means, its default and its allowed values, declared once
/// with CLI11 (which also writes --help), then the checks that span several flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include <strata/strata.hpp>

#include "../common/strategy_flags.hpp"

namespace fmnist {

struct Options : trainer::StrategyFlags {
  std::string model = "mlp";
  int epochs = 1;
  std::uint64_t seed = 0;
  std::int64_t batch = 64;  ///< per replica: the global batch is batch × replicas
  double lr = 0.05;
  std::optional<double> momentum;  ///< 0.9, or 0.7 under an asynchronous parameter server
  std::string data_dir = strata::data::default_fashion_mnist_dir();
  int threads = 1;
  std::int64_t max_steps = -1;  ///< per epoch (-1: the whole epoch)
  bool no_eval = false, quiet = false;

  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string metrics_path, timeline_path;
  int metrics_every = 1;

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
  app.add_option("--seed", o.seed, "initialisation and shuffling")->capture_default_str();
  app.add_option("--batch", o.batch, "per replica: the global batch is B x replicas, and --lr applies to it")
      ->capture_default_str();
  app.add_option("--lr", o.lr)->capture_default_str();
  app.add_option("--momentum", o.momentum, "0.9, or 0.7 under --strategy parameter_server --mode async");
  app.add_option("--data", o.data_dir, "the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--threads", o.threads, "BLAS threads")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "stop each epoch after this many steps (-1: all)");
  app.add_flag("--no-eval", o.no_eval, "skip the test-set evaluation");
  app.add_flag("--quiet", o.quiet, "no progress line");
  trainer::add_strategy_flags(app, o, "cpu or cuda:N (one_device, or central_storage with replica r on cuda:N+r; cuda needs fashion_mnist_cuda)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "resume from the newest complete checkpoint there, and save "
                 "there at the end");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also save every this many steps");
  app.add_option("--metrics", o.metrics_path, "the chief's per-step figures as CSV (tools/plot_metrics.py)");
  app.add_option("--metrics-every", o.metrics_every)->capture_default_str();
  app.add_option("--timeline", o.timeline_path, "a Chrome trace of every rank (https://ui.perfetto.dev)");
  try {
    app.parse(argc, argv);
    auto at_least = [](const char* flag, auto v, decltype(v) lo) {
      if (v < lo) throw CLI::ValidationError(flag, "must be at least " + std::to_string(lo) + ", got " + std::to_string(v));
    };
    at_least("--epochs", o.epochs, 1);
    at_least("--batch", o.batch, std::int64_t{1});
    at_least("--threads", o.threads, 1);
    at_least("--metrics-every", o.metrics_every, 1);
    at_least("--checkpoint-every", o.checkpoint_every, std::int64_t{0});
    if (o.momentum && !(*o.momentum >= 0)) throw CLI::ValidationError("--momentum", "must be non-negative");
    trainer::check_strategy_flags(app, o);
    if (app.count("--checkpoint-every") > 0 && o.checkpoint_dir.empty())
      throw CLI::ValidationError("--checkpoint-every", "applies to runs with --checkpoint-dir only");
    if (o.strategy == "parameter_server" && o.mode == "async" && !o.checkpoint_dir.empty())
      throw CLI::ValidationError("--checkpoint-dir", "needs --mode sync under --strategy parameter_server: an "
                                 "asynchronous job has no step at which every server's state is one consistent point");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace fmnist

/// \file
/// The trainer's flags: what each means, its default and its allowed values, declared once
/// with CLI11 (which also writes --help), then the checks that span several flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include <strata/strata.hpp>

namespace fmnist {

struct Options {
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

  std::string strategy = "one_device";
  int replicas = 2;
  std::string collective;  ///< mpi, gloo or nccl (multi_worker_mirrored, parameter_server)
  std::string compression = "none", device = "cpu";
  std::string gradients, rows;  ///< mirrored; empty: STRATA_GRADIENTS / STRATA_ROW_SPLIT or the defaults
  int servers = 0;
  std::string mode = "sync", update_on = "servers";
  std::int64_t staleness = -1;

  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string metrics_path, timeline_path;
  int metrics_every = 1;

  /// --device as a Device: "cpu" or "cuda:N".
  strata::Device parsed_device() const {
    if (device == "cpu") return strata::Device::cpu();
    return strata::Device::cuda(std::stoi(device.substr(5)));
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
  CLI::App app{"Trains the reference MLP or CNN on Fashion-MNIST under any strategy; prints a progress line and "
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
  app.add_option("--strategy", o.strategy)
      ->check(CLI::IsMember({"one_device", "mirrored", "central_storage", "multi_worker_mirrored", "parameter_server"}))
      ->capture_default_str();
  app.add_option("--replicas", o.replicas, "replica threads (mirrored, central_storage)")
      ->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--collective", o.collective, "multi_worker_mirrored: mpi, gloo or nccl; parameter_server: mpi or gloo")
      ->check(CLI::IsMember({"mpi", "gloo", "nccl"}));
  app.add_option("--compression", o.compression, "16-bit gradients on the wire (multi_worker_mirrored)")
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  app.add_option("--gradients", o.gradients, "mirrored: sharded keeps each replica's summed gradients in its share "
                 "only (docs/gradient_engine.md)")->check(CLI::IsMember({"whole", "sharded"}));
  app.add_option("--rows", o.rows, "mirrored: measured splits each batch by the replicas' measured speed "
                 "(docs/performance.md)")->check(CLI::IsMember({"even", "measured"}));
  app.add_option("--device", o.device, "cpu or cuda:N (one_device; cuda needs fashion_mnist_cuda)")
      ->check(CLI::Validator(
          [](std::string& v) {
            const bool cuda = v.rfind("cuda:", 0) == 0 && v.size() > 5 &&
                              v.find_first_not_of("0123456789", 5) == std::string::npos && v.size() < 9;
            return v == "cpu" || cuda ? std::string() : "expects cpu or cuda:N, got '" + v + "'";
          },
          "cpu|cuda:N"))
      ->capture_default_str();
  app.add_option("--servers", o.servers, "parameter_server: server ranks (0: STRATA_NUM_SERVERS, else 1)");
  app.add_option("--mode", o.mode, "parameter_server")->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--staleness", o.staleness, "parameter_server --mode async: pushes a worker may run ahead (-1: any)");
  app.add_option("--update-on", o.update_on, "parameter_server")->check(CLI::IsMember({"servers", "workers"}));
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
    at_least("--servers", o.servers, 0);
    at_least("--checkpoint-every", o.checkpoint_every, std::int64_t{0});
    if (o.momentum && !(*o.momentum >= 0)) throw CLI::ValidationError("--momentum", "must be non-negative");
    auto only = [&](const char* flag, bool applies, const char* where) {
      if (app.count(flag) > 0 && !applies) throw CLI::ValidationError(flag, std::string("applies to ") + where + " only");
    };
    only("--replicas", o.strategy == "mirrored" || o.strategy == "central_storage", "--strategy mirrored|central_storage");
    only("--collective", o.strategy == "multi_worker_mirrored" || o.strategy == "parameter_server",
         "--strategy multi_worker_mirrored|parameter_server");
    only("--compression", o.strategy == "multi_worker_mirrored", "--strategy multi_worker_mirrored");
    for (const char* f : {"--gradients", "--rows"}) only(f, o.strategy == "mirrored", "--strategy mirrored");
    for (const char* f : {"--servers", "--mode", "--staleness", "--update-on"})
      only(f, o.strategy == "parameter_server", "--strategy parameter_server");
    only("--device", o.strategy == "one_device", "--strategy one_device (the others run on the CPU in this trainer)");
    only("--checkpoint-every", !o.checkpoint_dir.empty(), "runs with --checkpoint-dir");
    if (o.strategy == "multi_worker_mirrored" && o.collective.empty())
      throw CLI::RequiredError("--collective (mpi, gloo or nccl) for --strategy multi_worker_mirrored");
    if (o.strategy == "parameter_server" && o.collective == "nccl")
      throw CLI::ValidationError("--collective", "parameter_server runs over mpi or gloo");
    if (o.strategy == "parameter_server" && o.mode == "async" && !o.checkpoint_dir.empty())
      throw CLI::ValidationError("--checkpoint-dir", "needs --mode sync under --strategy parameter_server: an "
                                 "asynchronous job has no step at which every server's state is one consistent point");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace fmnist

/// \file
/// The flags every trainer shares, one name for one thing: how long to train, the batch, the
/// rate, the seed, the data, the checkpoints, the output and the precision. Each trainer declares them here
/// with its own defaults and words, and its model's flags beside them.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace trainer {

struct RunFlags {
  std::int64_t steps = -1;  ///< optimizer steps in all (-1: as many as the trainer's epochs give)
  std::int64_t batch = 64;  ///< per replica: the global batch is batch x replicas
  std::int64_t global_batch = 0;  ///< > 0: the global batch whatever the replica count (global_batch_of)
  double lr = 0.01;
  std::uint64_t seed = 0;
  std::string data_dir;
  bool quiet = false;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  bool start_afresh = false;
  std::string precision = "fp32";  ///< the products' precision policy (strata::precision::from_name)
};

/// What a trainer says of the shared flags whose meaning is its own.
struct RunFlagWords {
  const char* steps;  ///< e.g. "optimizer steps"
  const char* batch;  ///< what one row of a batch is
  const char* lr;     ///< the optimizer and its schedule
  const char* data;   ///< where the data is read from
};

/// Declares the shared flags on `app` (their defaults are what `f` holds). `--max-steps` is
/// the old spelling of `--steps`.
inline void add_run_flags(CLI::App& app, RunFlags& f, const RunFlagWords& words) {
  app.add_option("--steps,--max-steps", f.steps, words.steps)->capture_default_str();
  app.add_option("--batch", f.batch, std::string(words.batch) + " per replica: the global batch is B x replicas")
      ->capture_default_str();
  app.add_option("--global-batch", f.global_batch, std::string(words.batch) + " in each step across all replicas, "
                 "whatever their number (each replica takes its share; instead of --batch): a checkpoint then resumes "
                 "on any number of replicas, its state resharded");
  app.add_option("--lr", f.lr, words.lr)->capture_default_str();
  app.add_option("--seed", f.seed, "initialisation and shuffling")->capture_default_str();
  app.add_option("--data", f.data_dir, words.data)->capture_default_str();
  app.add_flag("--quiet", f.quiet, "no progress lines");
  app.add_option("--checkpoint-dir", f.checkpoint_dir, "resume from the newest complete checkpoint there, and save "
                 "there at the end");
  app.add_option("--checkpoint-every", f.checkpoint_every, "also save every this many steps (0: only at the end)");
  app.add_flag("--start-afresh", f.start_afresh, "with --checkpoint-dir: when none of its checkpoints reads, train "
               "from step 0 and keep them set aside (without it, that is an error naming each file)");
  app.add_option("--precision", f.precision, "what the products compute in: fp32, bf16 (operands rounded to "
                 "bfloat16, float32 sums and variables) or fp16 (to float16, with a dynamic loss scale); "
                 "docs/mixed_precision.md")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
}

/// The checks of the shared flags, once `app` has parsed (CLI11 errors). `async_server`: the
/// strategy is an asynchronous parameter server, which has no consistent point to save.
inline void check_run_flags(const CLI::App& app, const RunFlags& f, bool async_server) {
  if (f.steps < -1 || f.steps == 0)
    throw CLI::ValidationError("--steps", "must be at least 1 (or -1: all), got " + std::to_string(f.steps));
  if (f.batch < 1) throw CLI::ValidationError("--batch", "must be at least 1, got " + std::to_string(f.batch));
  if (app.count("--global-batch") > 0 && f.global_batch < 1)
    throw CLI::ValidationError("--global-batch", "must be at least 1, got " + std::to_string(f.global_batch));
  if (app.count("--global-batch") > 0 && app.count("--batch") > 0)
    throw CLI::ValidationError("--global-batch", "sets the batch across all replicas: give it or --batch, not both");
  if (f.checkpoint_every < 0)
    throw CLI::ValidationError("--checkpoint-every", "must not be negative, got " + std::to_string(f.checkpoint_every));
  for (const char* flag : {"--checkpoint-every", "--start-afresh"})
    if (app.count(flag) > 0 && f.checkpoint_dir.empty())
      throw CLI::ValidationError(flag, "applies to runs with --checkpoint-dir only");
  if (async_server && !f.checkpoint_dir.empty())
    throw CLI::ValidationError("--checkpoint-dir", "needs --mode sync under --strategy parameter_server: an "
                               "asynchronous job has no step at which every server's state is one consistent point");
}

/// The global batch of a step over `replicas` replicas: --global-batch, else --batch each.
inline std::int64_t global_batch_of(const RunFlags& f, int replicas) {
  return f.global_batch > 0 ? f.global_batch : f.batch * replicas;
}

}  // namespace trainer

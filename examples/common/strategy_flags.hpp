/// \file
/// The trainers' strategy flags, declared once with CLI11: which strategy, its collective and
/// its options; the checks that span several of them; and with_strategy(), which maps them
/// onto the strategy templates (one instantiation of the trainer's loop each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#if STRATA_HAS_NCCL
#include <strata/collective/nccl.hpp>
#endif

namespace trainer {

struct StrategyFlags {
  std::string strategy = "one_device";
  int replicas = 2;
  std::string collective;  ///< mpi, gloo or nccl (multi_worker_mirrored, parameter_server); nccl (mirrored on GPUs)
  std::string compression = "none", device = "cpu";
  std::string gradients, rows;  ///< mirrored; empty: STRATA_GRADIENTS / STRATA_ROW_SPLIT or the defaults
  int servers = 0;
  std::string mode = "sync", update_on = "servers", tables = "rows";
  std::int64_t staleness = -1;
  bool dispatch_batches = false;
  int shard_stage = 2;  ///< sharded: 1 the optimizer state, 2 also the gradients, 3 also the parameters (ShardStage)
  std::size_t unit_bytes = strata::ShardOptions{}.unit_bytes;  ///< sharded, stage 3: the wrap units' size rule

  /// --device as a Device: "cpu" or "cuda:N".
  strata::Device parsed_device() const {
    if (device == "cpu") return strata::Device::cpu();
    return strata::Device::cuda(std::stoi(device.substr(5)));
  }
};

/// Declares the strategy flags on `app`; `device_help` says what --device needs in this trainer.
/// `sharded`: the trainer also offers ShardedStrategy (with_strategy<true>).
inline void add_strategy_flags(CLI::App& app, StrategyFlags& f, const std::string& device_help, bool sharded = false) {
  std::vector<std::string> strategies{"one_device", "mirrored", "central_storage", "multi_worker_mirrored",
                                      "parameter_server"};
  if (sharded) {
    strategies.push_back("sharded");
    app.add_option("--shard-stage", f.shard_stage, "sharded: 1 divides the optimizer state among the processes, 2 also "
                   "the summed gradients, 3 also the parameters, gathered per wrap unit around its use (docs/sharding.md)")
        ->check(CLI::IsMember({1, 2, 3}))->capture_default_str();
    app.add_option("--unit-bytes", f.unit_bytes, "sharded, stage 3: a module whose parameters take at most this many "
                   "bytes (and at least an eighth of it) is a wrap unit")
        ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40))->capture_default_str();
  }
  app.add_option("--strategy", f.strategy)->check(CLI::IsMember(strategies))->capture_default_str();
  app.add_option("--replicas", f.replicas, "replica threads (mirrored, central_storage)")
      ->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--collective", f.collective, "multi_worker_mirrored, sharded: mpi, gloo or nccl; parameter_server: mpi or gloo; "
                 "mirrored: nccl puts its replicas on the GPUs cuda:0 .. cuda:replicas-1")
      ->check(CLI::IsMember({"mpi", "gloo", "nccl"}));
  app.add_option("--compression", f.compression, "16-bit gradients on the wire (multi_worker_mirrored)")
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  app.add_option("--gradients", f.gradients, "mirrored: sharded keeps each replica's summed gradients in its share "
                 "only (docs/gradient_engine.md)")->check(CLI::IsMember({"whole", "sharded"}));
  app.add_option("--rows", f.rows, "mirrored: measured splits each batch by the replicas' measured speed "
                 "(docs/performance.md)")->check(CLI::IsMember({"even", "measured"}));
  app.add_option("--device", f.device, device_help)
      ->check(CLI::Validator(
          [](std::string& v) {
            const bool cuda = v.rfind("cuda:", 0) == 0 && v.size() > 5 &&
                              v.find_first_not_of("0123456789", 5) == std::string::npos && v.size() < 9;
            return v == "cpu" || cuda ? std::string() : "expects cpu or cuda:N, got '" + v + "'";
          },
          "cpu|cuda:N"))
      ->capture_default_str();
  app.add_option("--servers", f.servers, "parameter_server: server ranks (0: STRATA_NUM_SERVERS, else 1)");
  app.add_option("--mode", f.mode, "parameter_server")->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--staleness", f.staleness, "parameter_server --mode async: pushes a worker may run ahead (-1: any)");
  app.add_option("--update-on", f.update_on, "parameter_server")->check(CLI::IsMember({"servers", "workers"}));
  app.add_option("--tables", f.tables, "parameter_server: row-sparse tables go by rows, live on the servers only "
                 "(remote: workers look up the rows they read), or go whole (the dense protocol)")
      ->check(CLI::IsMember({"rows", "remote", "whole"}));
  app.add_flag("--dispatch-batches", f.dispatch_batches, "parameter_server --mode async: the first server hands out "
               "the epoch's batches, so a lost worker's are trained by the others");
}

/// The checks that span several strategy flags, once `app` has parsed (CLI11 errors).
inline void check_strategy_flags(const CLI::App& app, const StrategyFlags& f) {
  if (f.servers < 0) throw CLI::ValidationError("--servers", "must be at least 0, got " + std::to_string(f.servers));
  auto only = [&](const char* flag, bool applies, const char* where) {
    if (app.count(flag) > 0 && !applies) throw CLI::ValidationError(flag, std::string("applies to ") + where + " only");
  };
  only("--replicas", f.strategy == "mirrored" || f.strategy == "central_storage", "--strategy mirrored|central_storage");
  only("--collective",
       f.strategy == "multi_worker_mirrored" || f.strategy == "parameter_server" || f.strategy == "mirrored" ||
           f.strategy == "sharded",
       "--strategy multi_worker_mirrored|sharded|parameter_server|mirrored");
  if (app.get_option_no_throw("--shard-stage") != nullptr)  // (declared by the trainers that offer sharded)
    only("--shard-stage", f.strategy == "sharded", "--strategy sharded");
  if (app.get_option_no_throw("--unit-bytes") != nullptr)
    only("--unit-bytes", f.strategy == "sharded" && f.shard_stage == 3, "--strategy sharded --shard-stage 3");
  if (f.strategy == "sharded" && f.collective != "mpi" && f.collective != "gloo" && f.collective != "nccl")
    throw CLI::RequiredError("--collective (mpi, gloo or nccl) for --strategy sharded");
  if (f.strategy == "mirrored" && !f.collective.empty() && f.collective != "nccl")
    throw CLI::ValidationError("--collective", "mirrored takes nccl (replicas on GPUs) or none (replicas on CPU threads)");
  only("--compression", f.strategy == "multi_worker_mirrored", "--strategy multi_worker_mirrored");
  for (const char* flag : {"--gradients", "--rows"}) only(flag, f.strategy == "mirrored", "--strategy mirrored");
  for (const char* flag : {"--servers", "--mode", "--staleness", "--update-on", "--tables"})
    only(flag, f.strategy == "parameter_server", "--strategy parameter_server");
  only("--dispatch-batches", f.strategy == "parameter_server" && f.mode == "async" && f.staleness < 0,
       "--strategy parameter_server --mode async without --staleness");
  only("--device", f.strategy == "one_device" || f.strategy == "central_storage",
       "--strategy one_device|central_storage (mirrored takes --collective nccl for GPUs)");
  if (f.strategy == "multi_worker_mirrored" && f.collective.empty())
    throw CLI::RequiredError("--collective (mpi, gloo or nccl) for --strategy multi_worker_mirrored");
  if (f.tables == "remote" && f.update_on == "workers")
    throw CLI::ValidationError("--tables", "remote needs --update-on servers (a worker without the table cannot update it)");
  if (f.strategy == "parameter_server" && f.collective == "nccl")
    throw CLI::ValidationError("--collective", "parameter_server runs over mpi or gloo");
}

/// Runs f(static_cast<C*>(nullptr)) with the collective C that --collective names (mpi by
/// default); one this build lacks is an error naming how to get it.
template <class F>
void with_collective(const StrategyFlags& o, F&& f) {
  const std::string c = o.collective.empty() ? "mpi" : o.collective;
#if STRATA_HAS_MPI
  if (c == "mpi") return f(static_cast<strata::collective::Mpi*>(nullptr));
#endif
#if STRATA_HAS_GLOO
  if (c == "gloo") return f(static_cast<strata::collective::Gloo*>(nullptr));
#endif
#if STRATA_HAS_NCCL && (STRATA_HAS_MPI || STRATA_HAS_GLOO)  // NCCL's ranks meet through MPI or Gloo
  if (c == "nccl") return f(static_cast<strata::collective::Nccl*>(nullptr));
#endif
  (void)f;  // a build with no collective at all
  STRATA_THROW(strata::invalid_argument, "strata.example", "this build has no ", c, ": configure with -D", c,
               "=enabled", c == "nccl" ? " (and -Dmpi or -Dgloo), and run a CUDA build of the trainer" : "");
}

/// Runs f(strategy) with the strategy the flags name; `kSharded`: ShardedStrategy among them
/// (each stage and collective one more instantiation of the trainer's loop).
template <bool kSharded = false, class F>
void with_strategy(const StrategyFlags& o, F&& f) {
  if constexpr (kSharded)
    if (o.strategy == "sharded") {
      with_collective(o, [&]<class C>(C*) {  // Nccl: each rank's shards on its local GPU
        if (o.shard_stage == 1) {
          strata::ShardedStrategy<C, strata::ShardStage::optimizer_state> s;
          f(s);
        } else if (o.shard_stage == 3) {
          strata::ShardOptions units;
          units.unit_bytes = o.unit_bytes;
          strata::ShardedStrategy<C, strata::ShardStage::parameters> s(strata::MultiWorkerOptions{}, units);
          f(s);
        } else {
          strata::ShardedStrategy<C, strata::ShardStage::gradients> s;
          f(s);
        }
      });
      return;
    }
  if (o.strategy == "one_device") {
    strata::OneDeviceStrategy s(o.parsed_device());
    f(s);
  } else if (o.strategy == "mirrored") {
    strata::MirroredOptions mo;
    if (!o.gradients.empty()) mo.gradients = o.gradients == "sharded" ? strata::GradientLayout::sharded : strata::GradientLayout::whole;
    if (!o.rows.empty()) mo.rows = o.rows == "measured" ? strata::RowSplit::measured : strata::RowSplit::even;
    if (o.collective == "nccl") {
#if STRATA_HAS_NCCL
      strata::MirroredStrategy<strata::collective::Nccl> s(o.replicas, mo);  // replica r on cuda:r
      f(s);
#else
      STRATA_THROW(strata::invalid_argument, "strata.example", "this build has no nccl: configure with -Dcuda=enabled "
                   "-Dnccl=enabled, and run a CUDA build of the trainer");
#endif
    } else {
      strata::MirroredStrategy s(o.replicas, mo);
      f(s);
    }
  } else if (o.strategy == "central_storage") {
    const strata::Device first = o.parsed_device();
    std::vector<strata::Device> devices;  // cuda:N: replica r on cuda:N+r, the variables on the host
    for (int r = 0; r < o.replicas; ++r)
      devices.push_back(first.kind == strata::DeviceKind::cpu ? first : strata::Device::cuda(first.index + r));
    strata::CentralStorageStrategy s(devices);
    f(s);
  } else if (o.strategy == "multi_worker_mirrored") {
    const strata::MultiWorkerOptions mw{.compression = o.compression == "fp16"   ? strata::Compression::fp16
                                                       : o.compression == "bf16" ? strata::Compression::bf16
                                                                                 : strata::Compression::none};
    with_collective(o, [&]<class C>(C*) {
      strata::MultiWorkerMirroredStrategy<C> s(mw);  // Nccl: each rank on its local GPU
      f(s);
    });
  } else {  // parameter_server
    const strata::ParameterServerOptions ps{
        .servers = o.servers, .update_on_servers = o.update_on == "servers", .staleness = o.staleness,
        .sparse_tables = o.tables != "whole", .dispatch_batches = o.dispatch_batches,
        .remote_tables = o.tables == "remote"};
    with_collective(o, [&]<class C>(C*) {
      if constexpr (strata::ps::TransportOf<C>) {
        if (o.mode == "sync") {
          strata::ParameterServerStrategy<C, strata::ps::Sync> s(ps);
          f(s);
        } else {
          strata::ParameterServerStrategy<C, strata::ps::Async> s(ps);
          f(s);
        }
      }
    });
  }
}

}  // namespace trainer

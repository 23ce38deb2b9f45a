/// \file
/// ShardedStrategy<C, Stage>: data parallelism with one replica per process whose model state
/// is divided among the processes (DeepSpeed's ZeRO, PyTorch's FSDP): each rank keeps the
/// optimizer state of its shard of every parameter only (ShardStage::optimizer_state), and
/// with ShardStage::gradients also receives only its shard of the summed gradients (a
/// reduce-scatter instead of an all-reduce). Over a device collective (Nccl) the model, its
/// shards and their optimizer state live on the rank's GPU. Everything else is
/// MultiWorkerMirroredStrategy's:
/// the process group, each worker's rows of every global batch, the values across
/// processes; the user's loop is the same, the template argument alone changes.
/// docs/sharding.md.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/state_shards.hpp>
#include <strata/strategy/detail/sharded_context.hpp>
#include <strata/strategy/detail/sharded_model.hpp>
#include <strata/strategy/detail/wrap_units.hpp>
#include <strata/strategy/gathered_parameters.hpp>
#include <strata/strategy/multi_worker_mirrored.hpp>
#include <strata/tensor/placement.hpp>  // move_in_place

namespace strata {

/// How much of the model state ShardedStrategy divides among the ranks (ZeRO's stages).
enum class ShardStage {
  optimizer_state = 1,  ///< the optimizer's state; gradients all-reduced whole, parameters whole
  gradients = 2,        ///< also the summed gradients: each rank receives its shard of them alone
  parameters = 3,       ///< also the parameters, gathered per wrap unit around its use
};

/// Stage 3's wrap units: the modules whose parameters are gathered together around their use
/// (docs/sharding.md, "Stage 3"). A unit must be called through its operator() (as the
/// library's models call their children), which runs the hook that gathers it.
struct ShardOptions {
  /// Names of the model's modules (as named_modules() and named_parameters() name them:
  /// "h.0", "h.1", ...); empty: the size rule picks them.
  std::vector<std::string> wrap_units;
  /// The size rule: walking down from the model, a module whose parameters take at most this
  /// many bytes, and at least an eighth of it, is a unit; a larger one is walked into. The
  /// parameters of no unit stay whole on every rank, as under stage 2.
  std::size_t unit_bytes = std::size_t{64} << 20;
};

/// One replica per process, its model state sharded.
///
/// @code
/// strata::ShardedStrategy<strata::collective::Mpi> strategy;                                   // under mpirun
/// strata::ShardedStrategy<strata::collective::Gloo, strata::ShardStage::optimizer_state> s1;  // under strata-run
/// @endcode
template <class C, ShardStage Stage = ShardStage::gradients>
class ShardedStrategy : public MultiWorkerMirroredStrategy<C> {
  using Base = MultiWorkerMirroredStrategy<C>;

 public:
  static constexpr const char* name = "sharded";
  static constexpr ShardStage stage = Stage;

  /// Joins the job through C's constructor, called with `args` (e.g. a Gloo prefix). The split
  /// update of MultiWorkerOptions does not apply: every rank updates its own shards.
  template <class... A>
  explicit ShardedStrategy(MultiWorkerOptions o, A&&... args)
      : Base(without_split(o), std::forward<A>(args)...) {}
  /// With stage 3's wrap units chosen by `shard` (the other stages ignore it).
  template <class... A>
  ShardedStrategy(MultiWorkerOptions o, ShardOptions shard, A&&... args)
      : Base(without_split(o), std::forward<A>(args)...), shard_(std::move(shard)) {}
  ShardedStrategy() : ShardedStrategy(MultiWorkerOptions{}) {}

  /// What `factory` makes: a model's parameters broadcast from rank 0 and laid out in shards;
  /// an optimizer over such a model's parameters made to update this rank's shards only
  /// (Optimizer::hold_shards), with their state.
  template <class F>
    requires std::invocable<F&>
  std::invoke_result_t<F&> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    using T = std::invoke_result_t<F&>;
    T made = factory();
    if constexpr (detail::HasParameters<T>) {
      STRATA_REQUIRE(this->options_.compression == Compression::none, invalid_argument, "strata.strategy",
                     "ShardedStrategy: gradient compression on the wire is not available with sharding yet");
      if constexpr (collective::DeviceCollective<C>) {  // a device collective (Nccl): the shards live on its GPU
        move_in_place(made.parameters(), Device::cuda(this->comm_.device()));
        if constexpr (detail::HasBuffers<T>) move_in_place(made.buffers(), Device::cuda(this->comm_.device()));
      }
      detail::broadcast_parameters(this->comm_, made.parameters(), 0);
      detail::broadcast_generators(this->comm_, made, 0);
      detail::WrapUnits units;
      if constexpr (Stage == ShardStage::parameters) {
        static_assert(std::is_base_of_v<nn::Module, T>,
                      "ShardedStrategy<C, ShardStage::parameters>: the model must be an nn::Module, whose modules "
                      "are the wrap units gathered around their use");
        units = detail::choose_wrap_units(made, shard_.wrap_units, shard_.unit_bytes);
      }
      models_.push_back(std::make_unique<detail::ShardedModel<C>>(this->comm_, made.parameters(),
                                                                  this->options_.bucket_bytes,
                                                                  Stage != ShardStage::optimizer_state, std::move(units)));
      // The model's own storage, now copied into the layout, goes back to the system rather
      // than wait in the allocator's cache for tensors of its sizes.
      CachingHostAllocator::instance().empty_cache();
      this->engines_.push_back(&models_.back()->engine());  // gradient_stats()
    }
    if constexpr (std::is_base_of_v<optim::Optimizer, T>) {
      optim::Optimizer& opt = made;
      for (const auto& m : models_)
        if (m->updates(opt)) {
          opt.hold_shards(m->shards());
          return made;
        }
      STRATA_REQUIRE(opt.params().empty(), invalid_argument, "strata.strategy",
                     "ShardedStrategy: the optimizer's parameters are no model made in this strategy's scope; make "
                     "the model with strategy.scope(...) first and the optimizer over its parameters()");
    }
    return made;
  }

  /// Runs fn(ctx, batch) as this process's replica.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    using R = std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>;
    if constexpr (collective::DeviceCollective<C>) {  // the input follows the shards to the GPU
      const data::Batch on_device = batch.to(Device::cuda(this->comm_.device()));
      return run_sharded<R>([&](ReplicaContext& ctx) { return detail::run_on_rows(fn, ctx, on_device); });
    } else {
      return run_sharded<R>([&](ReplicaContext& ctx) { return detail::run_on_rows(fn, ctx, batch); });
    }
  }
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    return run_sharded<std::invoke_result_t<F&, ReplicaContext&>>(
        [&](ReplicaContext& ctx) { return detail::run_with_statistics(fn, ctx); });
  }

  /// Elements of a model's parameters (`params`, made in this strategy's scope) whose shards
  /// this rank holds, and the optimizer state of: about 1/N of them.
  std::size_t held_elements(std::span<const Tensor> params) const { return model_of(params, "held_elements").held_elements(); }

  /// Stage 3: the names of a model's wrap units (empty under the other stages).
  std::vector<std::string> wrap_units(std::span<const Tensor> params) const { return model_of(params, "wrap_units").unit_names(); }
  /// Stage 3: bytes the model's wrap units hold now, their parameters and gradient buckets
  /// (none between steps: each rank keeps its blocks alone).
  std::size_t unit_bytes_held(std::span<const Tensor> params) const {
    return model_of(params, "unit_bytes_held").unit_bytes_held();
  }

  /// Bytes a model's gradient buckets hold now: none between steps under stages 2 and 3 (each
  /// bucket holds memory from its first gradient to its reduce-scatter), all under stage 1.
  std::size_t gradient_bytes_held(std::span<const Tensor> params) const {
    return model_of(params, "gradient_bytes_held").gradient_bytes_held();
  }

  /// Every parameter of the model whole on this rank while the returned object lives (stage
  /// 3: each wrap unit all-gathered; with every rank, a collective); what is written to them
  /// meanwhile is kept. strata::gather_parameters calls it for any strategy.
  GatheredParameters gathered(std::span<const Tensor> params) {
    detail::check_cross_replica("gathered()");
    detail::ShardedModel<C>& m = model_of(params, "gathered");
    if (m.unit_names().empty()) return {};
    m.gather_all();  // (waits for the all-gathers in flight too)
    return GatheredParameters([&m] { m.release_all(); });
  }

  /// For a model that outlives this strategy (elastic::Trainer returns the last generation's):
  /// its parameters whole on this rank from now on, stage 3's hooks taken off its modules, so
  /// it runs as a plain model once the strategy is gone. With every rank, a collective; the
  /// strategy trains the model no more.
  void detach(std::span<const Tensor> params) {
    detail::check_cross_replica("detach()");
    model_of(params, "detach").detach();
  }

  // ---- checkpoints (TrainingCheckpoints calls these) ---------------------------------------
  // Every rank writes its shard of the training state (its elements of every parameter and
  // their optimizer state); the chief's checkpoint is the manifest that records the shards.

  /// This rank's elements of each of a model's parameters: the ranges its optimizer state covers.
  std::vector<optim::ElementRange> state_ranges(std::span<const Tensor> params) const {
    return model_of(params, "state_ranges").ranges();
  }
  /// Writes this rank's shard of the state at `step` into `dir` (atomically), with every rank;
  /// returns, on every rank, what the manifest records of the shards: their CRC-32Cs and the
  /// parameters' shapes. A rank that cannot write its shard stops every rank, named.
  checkpoint::NamedTensors save_state_shards(const std::filesystem::path& dir, std::int64_t step,
                                             std::span<const Tensor> params, const optim::Optimizer& opt) {
    const int me = this->comm_.rank(), n = this->comm_.size();
    std::int64_t crc = -1;
    std::exception_ptr failure;
    try {
      std::filesystem::create_directories(dir);
      const detail::ShardedModel<C>& m = model_of(params, "save_state_shards");
      crc = checkpoint::write_checkpoint(checkpoint::state_shard_path(dir, me, n, step),
                                         checkpoint::capture_state_shard(params, m.ranges(), opt, m.shards()));
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
    std::vector<std::int64_t> crcs(static_cast<std::size_t>(n));
    this->comm_.allgather_raw(&crc, crcs.data(), 1, DType::i64);
    if (failure) std::rethrow_exception(failure);
    for (int k = 0; k < n; ++k)
      if (crcs[static_cast<std::size_t>(k)] < 0)
        STRATA_THROW(io_error, "strata.checkpoint", "step ", step, " was not saved: rank ", k,
                     " could not write its shard of the training state into '", dir.string(), "'");
    return checkpoint::shard_records(params, crcs);
  }

 private:
  static MultiWorkerOptions without_split(MultiWorkerOptions o) {
    o.split_update = UpdateSplit::off;
    return o;
  }
  detail::ShardedModel<C>& model_of(std::span<const Tensor> params, const char* what) const {
    for (const auto& m : models_)
      if (m->of(params)) return *m;
    STRATA_THROW(invalid_argument, "strata.strategy", "ShardedStrategy::", what, ": parameters of no model made "
                 "in this strategy's scope");
  }
  template <class R, class Step>
  auto run_sharded(Step&& step) {
    detail::check_cross_replica("run()");
    detail::ReplicaScope scope(0, /*step=*/true, /*in_sync=*/this->comm_.size());
    detail::ShardedReplicaContext<C> ctx(this->comm_, models_);
    struct Settle {  // the step's units given back, however it ends
      std::span<const std::unique_ptr<detail::ShardedModel<C>>> models;
      ~Settle() {
        for (const auto& m : models) m->settle_units();
      }
    } settle{models_};
    return this->template run_in<R>(ctx, step);
  }

  ShardOptions shard_;
  std::vector<std::unique_ptr<detail::ShardedModel<C>>> models_;
};

template <class C, ShardStage Stage>
inline constexpr bool enable_strategy<ShardedStrategy<C, Stage>> = true;


}  // namespace strata

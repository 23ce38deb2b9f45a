/// \file
/// MirroredStrategy: synchronous data parallelism over the local devices of one process (on
/// CPU: N replica threads). Every variable created under scope() is mirrored — a copy per
/// replica, identical at creation — and inside run() resolves to the current replica's copy;
/// each replica has its own tape. apply_gradients all-reduces the gradients (bucketed,
/// overlapped with backward by a GradientEngine per replica and model); each replica then
/// updates its share of every variable and writes it into the other copies
/// (detail::SplitUpdate), so the copies stay equal.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/collective/collective.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/detail/collective_context.hpp>
#include <strata/strategy/gradient_engine.hpp>
#include <strata/strategy/detail/local_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/detail/row_balance.hpp>
#include <strata/strategy/detail/sharded_gradients.hpp>
#include <strata/strategy/detail/split_update.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/strategy/detail/thread_replicas.hpp>
#include <strata/tensor/device.hpp>

namespace strata {

/// Options of MirroredStrategy.
struct MirroredOptions {
  std::size_t bucket_bytes = default_bucket_bytes();  ///< gradient bucket size (see GradientEngine)
  collective::Options collective = collective::Options::from_env();
  /// Whether each replica updates its share of the variables and writes it into the other
  /// copies, instead of every replica updating all of its copy (detail::SplitUpdate): the
  /// same values, with 1/N of the optimizer's work per replica. `measured` (the default)
  /// splits in the steps where that measurably costs less (detail::SplitChoice);
  /// STRATA_SPLIT_UPDATE=0 / 1 / auto sets the default.
  UpdateSplit split_update = default_split_update();
  SplitChoiceOptions split_choice = {};  ///< how `measured` probes
  /// Where the summed gradients are after backward: every replica all of them (`whole`), or
  /// each replica its share, completed when read through Gradients before apply_gradients
  /// (`sharded`: less traffic between the cores; needs the split update;
  /// docs/gradient_engine.md). STRATA_GRADIENTS=whole / sharded sets the default.
  GradientLayout gradients = default_gradient_layout();
  /// How each global batch's rows are divided between the replicas: evenly, or in proportion
  /// to each replica's measured speed (`measured`: the faster cores take more rows instead of
  /// waiting for the slowest; the same sum of gradients, but not bit-reproducible;
  /// detail::RowBalance). STRATA_ROW_SPLIT=even / measured sets the default.
  RowSplit rows = default_row_split();
};

/// One replica per local device; CPU replicas are threads sharing memory through
/// collective::InProcess (tf.distribute.MirroredStrategy).
///
/// @code
/// strata::MirroredStrategy strategy(2);          // two CPU replicas
/// auto model = strategy.scope([] { return make_mlp(); });   // a Replicated<Sequential>
/// @endcode
template <class C = collective::InProcess>
class MirroredStrategy : public detail::ThreadReplicas<MirroredStrategy<C>> {
  static_assert(std::is_same_v<C, collective::InProcess>,
                "MirroredStrategy<C>: CPU replicas are threads of one process and communicate through "
                "collective::InProcess; GPU replicas need a CUDA build with NCCL (-Dcuda=enabled -Dnccl=enabled). For "
                "one replica per process use MultiWorkerMirroredStrategy<C>");

 // After the assertion, the rest compiles as InProcess: one error message, not a cascade.
  using Comm = collective::InProcess;

 public:
  static constexpr const char* name = "mirrored";

  explicit MirroredStrategy(int replicas = 2, MirroredOptions o = {})
      : detail::ThreadReplicas<MirroredStrategy>(replicas, "MirroredStrategy", o.collective), options_(o),
        engines_(static_cast<std::size_t>(this->n_)), splits_(static_cast<std::size_t>(this->n_)) {
    STRATA_CHECK(o.gradients != GradientLayout::sharded || o.split_update != UpdateSplit::off,
                 "MirroredStrategy: GradientLayout::sharded needs the split update (split_update on or measured): "
                 "with split_update off every replica updates all of its copy from whole gradients");
    this->set_row_split(o.rows);
  }
  /// One replica per device (CPU devices: one thread each).
  explicit MirroredStrategy(const std::vector<Device>& devices, MirroredOptions o = {})
      : MirroredStrategy(cpu_replicas(devices), o) {}

  /// One copy of what `factory` makes per replica (see detail::make_replicas); a model's
  /// copies get a GradientEngine each.
  template <class F>
    requires std::invocable<F&>
  Replicated<std::invoke_result_t<F&>> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    auto copies = detail::make_replicas(factory, this->n_);
    using T = std::invoke_result_t<F&>;
    if constexpr (detail::HasParameters<T>) {
      const bool sharded = options_.gradients == GradientLayout::sharded && this->n_ > 1;
      std::vector<std::vector<Tensor>> params;
      std::vector<std::vector<optim::ElementRange>> shares;  // where each replica reduces and updates
      for (int r = 0; r < this->n_; ++r) {
        params.push_back(copies[static_cast<std::size_t>(r)]->parameters());
        shares.push_back(detail::BucketPlan(params.back(), options_.bucket_bytes).shares(r, this->n_));
      }
      detail::SplitUpdate* split = nullptr;
      if (options_.split_update != UpdateSplit::off && this->n_ > 1) {
        splits_owned_.push_back(std::make_unique<detail::SplitUpdate>(
            params, std::move(shares), detail::local_state_home(), /*only=*/-1, /*sync=*/nullptr,
            detail::measured_choice(options_.split_update, options_.split_choice)));
        split = splits_owned_.back().get();
      }
      auto group = sharded ? std::make_shared<detail::ShardedGradients>(this->n_) : nullptr;
      for (int r = 0; r < this->n_; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        owned_.push_back(std::make_unique<GradientEngine<Comm>>(this->comm(r), params[ur], options_.bucket_bytes,
                                                                Compression::none,
                                                                detail::GradientSharding{group, r, split}));
        engines_[ur].push_back(owned_.back().get());
      }
      for (auto& s : splits_) s.push_back(split);
    }
    return Replicated<T>(std::move(copies));
  }

  /// Communication time of the gradient all-reduces so far (this process's replica 0).
  GradientStats gradient_stats() const {
    GradientStats total;
    for (const auto* e : engines_[0]) total += e->stats();
    return total;
  }

 private:
  friend class detail::ThreadReplicas<MirroredStrategy>;

  // Replica r's context: the all-reduce over the group, through its models' engines.
  template <class F>
  void with_context(int r, F&& f) {
    const auto ur = static_cast<std::size_t>(r);
    detail::CollectiveReplicaContext<Comm> ctx(this->comm(r), r, this->n_, engines_[ur], splits_[ur]);
    f(ctx);
  }

  static int cpu_replicas(const std::vector<Device>& devices) {
    for (const Device& d : devices)
      STRATA_CHECK(d.kind == DeviceKind::cpu, "MirroredStrategy on ", d, " needs a CUDA build (-Dcuda=enabled)");
    return static_cast<int>(devices.size());
  }

  MirroredOptions options_;
  std::vector<std::unique_ptr<GradientEngine<Comm>>> owned_;
  std::vector<std::vector<GradientEngine<Comm>*>> engines_;  // per replica
  std::vector<std::unique_ptr<detail::SplitUpdate>> splits_owned_;
  std::vector<std::vector<detail::SplitUpdate*>> splits_;  // per replica, beside engines_ (null: not split)
};

template <class C>
inline constexpr bool enable_strategy<MirroredStrategy<C>> = true;

}  // namespace strata

/// \file
/// MirroredStrategy: synchronous data parallelism over the local devices of one process, one
/// replica thread each: CPU replicas (MirroredStrategy<>, over collective::InProcess) or one
/// replica per GPU (MirroredStrategy<collective::Nccl>). Every variable created under scope()
/// is mirrored — a copy per replica, identical at creation — and inside run() resolves to the
/// current replica's copy; each replica has its own tape. apply_gradients all-reduces the
/// gradients (bucketed, overlapped with backward by a GradientEngine per replica and model).
/// On the CPU each replica then updates its share of every variable and writes it into the
/// other copies (detail::PartitionedUpdate), so the copies stay equal; on GPUs every replica updates
/// its whole copy from the all-reduced gradients, which are the same bits on every GPU.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/collective/collective.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/reducer/partitioned_update.hpp>
#include <strata/reducer/sharded_gradients.hpp>
#include <strata/strategy/detail/collective_context.hpp>
#include <strata/strategy/detail/make_replicas.hpp>
#include <strata/strategy/detail/row_balance.hpp>
#include <strata/strategy/detail/thread_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/device.hpp>
#include <strata/tensor/device_backend.hpp>  // cuda_device_count
#include <strata/tensor/placement.hpp>       // move_in_place

namespace strata {

/// Options of MirroredStrategy.
struct MirroredOptions {
  std::size_t bucket_bytes = default_bucket_bytes();  ///< gradient bucket size (see GradientEngine)
  collective::Options collective = collective::Options::from_env();
  /// Whether each replica updates its share of the variables and writes it into the other
  /// copies, instead of every replica updating all of its copy (detail::PartitionedUpdate): the
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

namespace detail {
/// A collective MirroredStrategy runs its replicas over: InProcess for CPU replicas, or a
/// device collective (Nccl) that one replica thread per GPU joins through the InProcess group
/// of the replicas (its bootstrap), on that GPU.
template <class C>
inline constexpr bool mirrored_collective =
    std::is_same_v<C, collective::InProcess> ||
    (collective::DeviceCollective<C> && std::constructible_from<C, collective::InProcess&, int, collective::Options>);
}  // namespace detail

/// One replica per local device: CPU replicas are threads sharing memory through
/// collective::InProcess; GPU replicas (C = collective::Nccl) are one thread per GPU, their
/// gradients all-reduced by NCCL on the GPUs (tf.distribute.MirroredStrategy).
///
/// @code
/// strata::MirroredStrategy strategy(2);          // two CPU replicas
/// auto model = strategy.scope([] { return make_mlp(); });   // a Replicated<Sequential>
/// strata::MirroredStrategy<strata::collective::Nccl> gpus;   // one replica per visible GPU
/// @endcode
template <class C = collective::InProcess>
class MirroredStrategy : public detail::ThreadReplicas<MirroredStrategy<C>> {
  static_assert(detail::mirrored_collective<C>,
                "MirroredStrategy<C>: CPU replicas are threads of one process and communicate through "
                "collective::InProcess, GPU replicas through collective::Nccl (a CUDA build with -Dcuda=enabled "
                "-Dnccl=enabled). For one replica per process use MultiWorkerMirroredStrategy<C>");

  // After the assertion, the rest compiles as InProcess: one error message, not a cascade.
  using Comm = std::conditional_t<detail::mirrored_collective<C>, C, collective::InProcess>;
  static constexpr bool kOnDevices = !std::is_same_v<Comm, collective::InProcess>;

 public:
  static constexpr const char* name = "mirrored";

  /// `replicas` replicas: CPU threads, or the GPUs cuda:0 .. cuda:replicas-1 (by default, two
  /// CPU replicas, or every GPU this process sees).
  explicit MirroredStrategy(int replicas = default_replicas(), MirroredOptions o = {})
      : MirroredStrategy(replicas, o, kOnDevices ? first_gpus(replicas) : std::vector<Device>{}) {}
  /// One replica per device: CPU devices for `MirroredStrategy<>`, distinct GPUs for `MirroredStrategy<Nccl>`.
  explicit MirroredStrategy(const std::vector<Device>& devices, MirroredOptions o = {})
      : MirroredStrategy(checked_devices(devices), o, kOnDevices ? devices : std::vector<Device>{}) {}

  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;
  /// The device collectives are ended on their replicas' threads, after the gradient engines
  /// that use them, all at once (each waits for its peers to finish).
  ~MirroredStrategy() {
    if constexpr (kOnDevices) {
      engines_.clear();
      owned_.clear();
      try {
        this->on_replica_threads([this](int r) { device_comms_[static_cast<std::size_t>(r)].reset(); });
      } catch (...) {  // a destructor throws nothing: what is left is freed below
      }
    }
  }

  /// One copy of what `factory` makes per replica (see detail::make_replicas); a model's
  /// copies get a GradientEngine each.
  template <class F>
    requires std::invocable<F&>
  Replicated<std::invoke_result_t<F&>> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    auto copies = detail::make_replicas(factory, this->n_);
    using T = std::invoke_result_t<F&>;
    if constexpr (detail::HasParameters<T>) {
      if constexpr (kOnDevices)  // copy r, equal to copy 0 already, onto replica r's GPU
        for (int r = 0; r < this->n_; ++r) {
          T& copy = *copies[static_cast<std::size_t>(r)];
          move_in_place(copy.parameters(), this->devices()[static_cast<std::size_t>(r)]);
          if constexpr (detail::HasBuffers<T>) move_in_place(copy.buffers(), this->devices()[static_cast<std::size_t>(r)]);
        }
      const bool sharded = options_.gradients == GradientLayout::sharded && this->n_ > 1;
      std::vector<std::vector<Tensor>> params;
      std::vector<std::vector<optim::ElementRange>> shares;  // where each replica reduces and updates
      for (int r = 0; r < this->n_; ++r) {
        params.push_back(copies[static_cast<std::size_t>(r)]->parameters());
        shares.push_back(detail::BucketPlan(params.back(), options_.bucket_bytes).shares(r, this->n_));
      }
      detail::PartitionedUpdate* split = nullptr;
      if (options_.split_update != UpdateSplit::off && this->n_ > 1 && !kOnDevices) {  // it writes host memory
        splits_owned_.push_back(std::make_unique<detail::PartitionedUpdate>(
            params, std::move(shares), detail::local_state_home(), /*only=*/-1, /*sync=*/nullptr,
            detail::measured_choice(options_.split_update, options_.split_choice)));
        split = splits_owned_.back().get();
      }
      auto group = sharded ? std::make_shared<detail::ShardedGradients>(this->n_) : nullptr;
      for (int r = 0; r < this->n_; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        detail::GradientSharding sharding;
        sharding.group = group;
        sharding.replica = r;
        sharding.split = split;
        owned_.push_back(std::make_unique<GradientEngine<Comm>>(replica_comm(r), params[ur], options_.bucket_bytes,
                                                                Compression::none, std::move(sharding)));
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

  MirroredStrategy(int replicas, const MirroredOptions& o, std::vector<Device> devices)
      : detail::ThreadReplicas<MirroredStrategy>(replicas, "MirroredStrategy", o.collective), options_(o),
        engines_(static_cast<std::size_t>(this->n_)), splits_(static_cast<std::size_t>(this->n_)) {
    STRATA_CHECK(o.gradients != GradientLayout::sharded || o.split_update != UpdateSplit::off,
                 "MirroredStrategy: GradientLayout::sharded needs the split update (split_update on or measured): "
                 "with split_update off every replica updates all of its copy from whole gradients");
    this->set_row_split(o.rows);
    if constexpr (kOnDevices) {
      STRATA_CHECK(o.gradients != GradientLayout::sharded, "MirroredStrategy over GPUs: GradientLayout::sharded "
                   "leaves the sums in host memory; GPU replicas hold their gradients whole");
      const int visible = cuda_device_count();
      for (const Device& d : devices)
        STRATA_CHECK(d.index >= 0 && d.index < visible, "MirroredStrategy<", Comm::name, ">: ", d,
                     " does not exist (this process sees ", visible, " CUDA devices)");
      this->set_devices(std::move(devices));
      // Each replica joins the device group on its own thread (the thread its steps run on),
      // at once: the group's set-up is collective over the replicas' InProcess group.
      device_comms_.resize(static_cast<std::size_t>(this->n_));
      this->on_replica_threads([&](int r) {
        const auto ur = static_cast<std::size_t>(r);
        device_comms_[ur] = std::make_unique<Comm>(this->comm(r), this->devices()[ur].index, o.collective);
      });
    }
  }

  static int default_replicas() {
    if constexpr (kOnDevices) {
      const int n = cuda_device_count();
      STRATA_CHECK(n > 0, "MirroredStrategy<", Comm::name, ">: this process sees no CUDA device (a program built "
                   "with -Dcuda=enabled, with its CUDA kernels, on a machine with a GPU)");
      return n;
    } else {
      return 2;
    }
  }
  static std::vector<Device> first_gpus(int replicas) {
    std::vector<Device> out;
    for (int r = 0; r < replicas; ++r) out.push_back(Device::cuda(r));
    return out;
  }
  static int checked_devices(const std::vector<Device>& devices) {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const Device& d = devices[i];
      if constexpr (kOnDevices) {
        STRATA_CHECK(d.kind == DeviceKind::cuda, "MirroredStrategy<", Comm::name, "> places its replicas on GPUs, got ",
                     d, " (CPU replicas: MirroredStrategy<>)");
        for (std::size_t j = 0; j < i; ++j)
          STRATA_CHECK(devices[j] != d, "MirroredStrategy<", Comm::name, ">: ", d,
                       " is named twice; each replica needs a GPU of its own");
      } else {
        STRATA_CHECK(d.kind == DeviceKind::cpu, "MirroredStrategy<> on ", d,
                     ": GPU replicas are MirroredStrategy<collective::Nccl> (a CUDA build with -Dnccl=enabled)");
      }
    }
    return static_cast<int>(devices.size());
  }

  // Replica r's collective: its rank of the InProcess group, or its device collective.
  Comm& replica_comm(int r) {
    if constexpr (kOnDevices)
      return *device_comms_[static_cast<std::size_t>(r)];
    else
      return this->comm(r);
  }

  // Replica r's context: the all-reduce over the group, through its models' engines.
  template <class F>
  void with_context(int r, F&& f) {
    const auto ur = static_cast<std::size_t>(r);
    detail::CollectiveReplicaContext<Comm> ctx(replica_comm(r), r, this->n_, engines_[ur], splits_[ur]);
    f(ctx);
  }

  MirroredOptions options_;
  std::vector<std::unique_ptr<Comm>> device_comms_;  // per replica, on its GPU (device collectives only)
  std::vector<std::unique_ptr<GradientEngine<Comm>>> owned_;
  std::vector<std::vector<GradientEngine<Comm>*>> engines_;  // per replica
  std::vector<std::unique_ptr<detail::PartitionedUpdate>> splits_owned_;
  std::vector<std::vector<detail::PartitionedUpdate*>> splits_;  // per replica, beside engines_ (null: not split)
};

template <class C>
inline constexpr bool enable_strategy<MirroredStrategy<C>> = true;

}  // namespace strata

/// \file
/// OneDeviceStrategy: one replica on one device. Variables, compute and input all live on
/// that device; reductions are identities. The basis for "the same loop on 1 or N devices".
#pragma once

#include <span>
#include <type_traits>
#include <utility>

#include <strata/data/pipeline.hpp>
#include <strata/strategy/detail/make_replicas.hpp>
#include <strata/strategy/detail/statistics_scope.hpp>
#include <strata/strategy/input_context.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/detail/process_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/device.hpp>
#include <strata/tensor/placement.hpp>  // move_in_place

namespace strata {

/// One replica on one device (tf.distribute.OneDeviceStrategy).
///
/// @code
/// strata::OneDeviceStrategy strategy;               // cpu
/// auto model = strategy.scope([] { return make_mlp(); });
/// for (auto& batch : strategy.distribute(pipeline))
///   strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) { ...; return loss; }, batch);
/// @endcode
class OneDeviceStrategy : detail::RejectsReplicaValues, public detail::TakesArithmeticValues<OneDeviceStrategy> {
 public:
  static constexpr const char* name = "one_device";

  /// On `device`; a cuda device needs a program with CUDA kernels (backend_of says how).
  explicit OneDeviceStrategy(Device device = Device::cpu()) : device_(device) {
    if (device.kind != DeviceKind::cpu) (void)backend_of(device);
  }

  int num_replicas_in_sync() const noexcept { return 1; }
  bool is_chief() const noexcept { return true; }
  Device device() const noexcept { return device_; }

  /// Calls `factory` and returns what it makes, its variables moved to this strategy's device
  /// (in place: handles to them, an optimizer's included, follow).
  template <class F>
    requires std::invocable<F&>
  std::invoke_result_t<F&> scope(F&& factory) {
    auto made = factory();
    if constexpr (detail::HasParameters<decltype(made)>) move_in_place(made.parameters(), device_);
    if constexpr (detail::HasBuffers<decltype(made)>) move_in_place(made.buffers(), device_);
    return made;
  }

  /// The input pipeline, prefetching at least two batches ahead; its batches are global batches.
  data::Pipeline distribute(const data::Pipeline& p) const {
    return p.options().prefetch > 0 ? p : p.prefetch(2);
  }

  /// The input `fn(context)` returns, this process being the one worker (InputContext).
  template <InputFunction F>
  data::Pipeline distribute(F&& fn) const {
    return distribute(fn(InputContext{1, 0, 1}));
  }

  /// Runs fn(ctx, batch) as the single replica and returns its result.
  template <class F>
    requires std::invocable<F&, ReplicaContext&, const data::Batch&>
  auto run(F&& fn, const data::Batch& batch) {
    using R = std::invoke_result_t<F&, ReplicaContext&, const data::Batch&>;
    Context ctx;
    if (device_.kind == DeviceKind::cpu)
      return detail::run_single_replica<R>(ctx, [&](ReplicaContext& c) { return detail::run_on_rows(fn, c, batch); });
    const data::Batch on_device = batch.to(device_);  // the input follows the variables
    return detail::run_single_replica<R>(ctx, [&](ReplicaContext& c) { return detail::run_on_rows(fn, c, on_device); });
  }
  /// Runs fn(ctx) as the single replica.
  template <class F>
    requires std::invocable<F&, ReplicaContext&>
  auto run(F&& fn) {
    using R = std::invoke_result_t<F&, ReplicaContext&>;
    Context ctx;
    return detail::run_single_replica<R>(ctx, [&](ReplicaContext& c) { return detail::run_with_statistics(fn, c); });
  }

  /// The values of every replica concatenated along axis 0: the one replica's value.
  Tensor gather(const PerReplica<Tensor>& v) const {
    STRATA_CHECK_EQ(v.size(), std::size_t{1}, "gather: a PerReplica from another strategy");
    return v[0];
  }

  /// The reduction over the one replica: its own value.
  Tensor reduce(ReduceOp, const PerReplica<Tensor>& v) const {
    STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
    return v[0];
  }
  using detail::RejectsReplicaValues::gather;  // a replica's own value: a compile-time error
  using detail::RejectsReplicaValues::reduce;
  using detail::TakesArithmeticValues<OneDeviceStrategy>::reduce;  // int64_t, float, ...
  using detail::TakesArithmeticValues<OneDeviceStrategy>::gather;
  double reduce(ReduceOp, const PerReplica<double>& v) const {
    STRATA_CHECK_EQ(v.size(), std::size_t{1}, "reduce: a PerReplica from another strategy");
    return v[0];
  }

  /// Adds `values` across the job's processes, in place: one process, so nothing to add.
  void sum_across_processes(std::span<double>) const {}

 private:
  /// Reductions over one replica are identities.
  class Context final : private detail::ReplicaStep, public ReplicaContext {
   public:
    Context() : ReplicaContext(static_cast<detail::ReplicaStep&>(*this)) {}
    int replica_id_in_sync_group() const noexcept override { return 0; }
    int num_replicas_in_sync() const noexcept override { return 1; }
    void all_reduce(ReduceOp, Tensor&) override {}

   private:
    bool aggregate(Gradients, double) override { return true; }
  };

  Device device_;
};

template <>
inline constexpr bool enable_strategy<OneDeviceStrategy> = true;

static_assert(Strategy<OneDeviceStrategy>);

}  // namespace strata

/// \file
/// CentralStorageStrategy: one copy of every variable, on the host; the replicas (local
/// devices — CPU threads here) compute on it, their gradients are reduced to the host and the
/// update is applied once (tf.distribute.experimental.CentralStorageStrategy).
///
/// On CPU the replicas' views of a variable share the central storage: each replica gets its
/// own tensor header over it (so its own gradient), no copy. In apply_gradients the replicas
/// sum their gradients into replica 0's — each replica adding one contiguous share of every
/// gradient — then replica 0's optimizer, the only one with state, updates the central
/// values, and a barrier publishes them to every replica before the next step reads them.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/strategy/local_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/strategy/thread_replicas.hpp>

namespace strata {

/// Variables on the host, replicas on the local devices. Takes no collective: all replicas
/// live in this process (use MultiWorkerMirroredStrategy<C> across processes).
///
/// @code
/// strata::CentralStorageStrategy strategy(2);   // two CPU replicas over one set of variables
/// @endcode
template <class NoCollective = void>
class CentralStorageStrategy : public detail::ThreadReplicas<CentralStorageStrategy<NoCollective>> {
  static_assert(std::is_void_v<NoCollective>,
                "CentralStorageStrategy takes no collective: its replicas share one process and one copy of the "
                "variables. Write CentralStorageStrategy<> (or let the constructor deduce it); for one replica per "
                "process use MultiWorkerMirroredStrategy<Mpi> or <Gloo>");

 public:
  static constexpr const char* name = "central_storage";

  explicit CentralStorageStrategy(int replicas = 2, collective::Options o = collective::Options::from_env())
      : detail::ThreadReplicas<CentralStorageStrategy>(replicas, "CentralStorageStrategy", o),
        pending_(static_cast<std::size_t>(this->n_)) {}

  /// One object per replica over one set of variables: replica r's parameters are views of
  /// replica 0's storage.
  template <class F>
    requires std::invocable<F&>
  Replicated<std::invoke_result_t<F&>> scope(F&& factory) {
    detail::check_cross_replica("scope()");
    auto copies = detail::make_replicas(factory, this->n_);
    using T = std::invoke_result_t<F&>;
    if constexpr (detail::HasParameters<T>) {
      const std::vector<Tensor>& central = copies[0]->parameters();
      for (int r = 1; r < this->n_; ++r) {
        const std::vector<Tensor>& mine = copies[static_cast<std::size_t>(r)]->parameters();
        for (std::size_t k = 0; k < mine.size(); ++k) mine[k].impl()->share_storage_of(*central[k].impl());
      }
    }
    return Replicated<T>(std::move(copies));
  }

 private:
  class Context final : public ReplicaContext {
   public:
    Context(CentralStorageStrategy& s, int r) : s_(s), r_(r) {}
    int replica_id_in_sync_group() const noexcept override { return r_; }
    int num_replicas_in_sync() const noexcept override { return s_.n_; }
    void all_reduce(ReduceOp op, Tensor& t) override {
      STRATA_CHECK(t.defined() && t.is_contiguous(), "all_reduce needs a defined, contiguous tensor");
      comm().allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
    }
    bool aggregate_gradients(Gradients g) override {
      STRATA_CHECK(sync_, "apply_gradients inside NoSync: the gradients would stay local to each replica");
      s_.pending_[static_cast<std::size_t>(r_)] = g;
      comm().barrier();  // every replica's gradients are final
      const Gradients& g0 = s_.pending_[0];
      for (std::size_t i = 0; i < g0.size(); ++i) {
        Tensor dst = g0[i];
        const auto n = dst.numel();
        const std::int64_t lo = data::detail::split_begin(n, r_, s_.n_), hi = data::detail::split_begin(n, r_ + 1, s_.n_);
        strata::detail::visit_floating(dst.dtype(), "apply_gradients", [&](auto tag) {
          using T = decltype(tag);
          T* d = dst.template data<T>();
          for (int q = 1; q < s_.n_; ++q)
            collective::detail::combine<T>(ReduceOp::Sum, static_cast<std::size_t>(hi - lo), d + lo,
                                           s_.pending_[static_cast<std::size_t>(q)][i].template data<T>() + lo);
        });
      }
      comm().barrier();  // replica 0's gradients hold the sum
      return r_ == 0;
    }
    void finish_update() override { comm().barrier(); }  // the central values are updated
    void set_gradient_sync(bool on) override { sync_ = on; }

   private:
    collective::InProcess& comm() { return s_.comm(r_); }
    CentralStorageStrategy& s_;
    int r_;
    bool sync_ = true;
  };

  friend class detail::ThreadReplicas<CentralStorageStrategy>;

  template <class F>
  void with_context(int r, F&& f) {
    Context ctx(*this, r);
    f(ctx);
  }

  std::vector<Gradients> pending_;  // each replica's gradients in the step being applied
};

template <class C>
inline constexpr bool enable_strategy<CentralStorageStrategy<C>> = true;

}  // namespace strata

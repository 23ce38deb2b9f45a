/// \file
/// CentralStorageStrategy: one copy of every variable, on the host; the replicas (local
/// devices — CPU threads here) compute on it, their gradients are reduced to the host and the
/// update is applied once (tf.distribute.experimental.CentralStorageStrategy).
///
/// On CPU the replicas' views of a variable share the central storage: each replica gets its
/// own tensor header over it (so its own gradient), no copy. In apply_gradients each replica
/// sums one contiguous share of every gradient across the replicas and writes the sum into
/// every replica's gradient, so all of them hold the same sum; then each replica updates its
/// share of the central values (a detail::PartitionedUpdate over views of one storage: nothing to
/// publish, one optimizer state that the replicas' optimizers hold together), and a barrier
/// makes the update visible before the next step reads it. An optimizer that cannot update
/// ranges, or gradients of other tensors than the scope's model's, are applied by replica 0.
/// A row-sparse table whose gradient every replica holds in rows is summed by rows instead:
/// each replica combines all replicas' rows in replica order (the same bits on each), and
/// the table's gradient stays rows (docs/design/sparse_tables.md).
///
/// Replicas on GPUs (a list of CUDA devices) compute on a device copy of the variables: at the
/// start of run() each replica copies the central values to its GPU and points its parameter
/// headers there; apply_gradients copies its gradients back to the host and points the
/// headers back at the central storage, and from there it is the CPU's data flow, the
/// optimizer and its state on the host (docs/gpu.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/collective/in_process.hpp>
#include <strata/data/pipeline.hpp>
#include <strata/reducer/partitioned_update.hpp>
#include <strata/reducer/row_aggregation.hpp>
#include <strata/strategy/detail/make_replicas.hpp>
#include <strata/strategy/detail/thread_replicas.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/replicated.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/device_backend.hpp>  // cuda_device_count
#include <strata/tensor/placement.hpp>       // move_in_place

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
        pending_(static_cast<std::size_t>(this->n_)),
        rows_(static_cast<std::size_t>(this->n_)) {}
  /// One replica per device: CPU devices (threads), or distinct GPUs, which compute on copies
  /// of the host's variables (docs/gpu.md).
  explicit CentralStorageStrategy(const std::vector<Device>& devices,
                                  collective::Options o = collective::Options::from_env())
      : CentralStorageStrategy(static_cast<int>(devices.size()), o) {
    bool gpus = false;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const Device& d = devices[i];
      STRATA_CHECK(d.kind == devices[0].kind, "CentralStorageStrategy: replicas on ", devices[0], " and ", d,
                   "; all on the CPU or all on GPUs");
      gpus = d.kind == DeviceKind::cuda;
      if (!gpus) continue;
      STRATA_CHECK(d.index >= 0 && d.index < cuda_device_count(), "CentralStorageStrategy: ", d,
                   " does not exist (this process sees ", cuda_device_count(), " CUDA devices)");
      for (std::size_t j = 0; j < i; ++j)
        STRATA_CHECK(devices[j] != d, "CentralStorageStrategy: ", d, " is named twice; each replica needs a GPU of its own");
    }
    if (gpus) this->set_devices(devices);
  }

  /// One object per replica over one set of variables: replica r's parameters are views of
  /// replica 0's storage, and replica r updates share r of each of them.
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
      if (this->n_ > 1) {
        std::vector<std::vector<Tensor>> views;
        std::vector<std::vector<optim::ElementRange>> shares;
        for (int r = 0; r < this->n_; ++r) {
          views.push_back(copies[static_cast<std::size_t>(r)]->parameters());
          std::vector<optim::ElementRange>& mine = shares.emplace_back();
          for (const Tensor& p : views.back()) mine.push_back(share(p.numel(), r));
        }
        splits_.push_back(std::make_unique<detail::PartitionedUpdate>(std::move(views), std::move(shares),
                                                                detail::local_state_home()));
      }
      if (!this->devices().empty()) {  // a device copy of the variables per replica; buffers to the GPUs
        OnDevices& m = on_devices_.emplace_back();
        m.on_device.assign(static_cast<std::size_t>(this->n_), 0);  // sized here: the replicas' threads only flip their own
        for (const Tensor& p : central) m.central.push_back(p.detach());
        for (int r = 0; r < this->n_; ++r) {
          const auto ur = static_cast<std::size_t>(r);
          const Device d = this->devices()[ur];
          T& copy = *copies[ur];
          m.headers.push_back(copy.parameters());
          auto& mine = m.copies.emplace_back();
          for (const Tensor& p : central) mine.push_back(Tensor::empty(p.shape(), p.dtype(), d));
          auto& staging = m.staging.emplace_back();
          for (const Tensor& p : central) staging.push_back(Tensor::empty(p.shape(), p.dtype()));
          auto& buffers = m.buffers.emplace_back();
          if constexpr (detail::HasBuffers<T>)
            for (const Tensor& b : copy.buffers())
              if (b.defined()) buffers.push_back({b, b.detach(), Tensor::empty(b.shape(), b.dtype(), d)});
        }
      }
    }
    return Replicated<T>(std::move(copies));
  }

 private:
  class Context final : private detail::ReplicaStep, public ReplicaContext {
   public:
    Context(CentralStorageStrategy& s, int r) : ReplicaContext(static_cast<detail::ReplicaStep&>(*this)), s_(s), r_(r) {}
    int replica_id_in_sync_group() const noexcept override { return r_; }
    int num_replicas_in_sync() const noexcept override { return s_.n_; }
    void all_reduce(ReduceOp op, Tensor& t) override {
      STRATA_CHECK(t.defined() && t.is_contiguous(), "all_reduce needs a defined, contiguous tensor");
      if (t.device().kind != DeviceKind::cpu) {  // a replica on a GPU: the replicas meet on the host
        Tensor h = t.to(Device::cpu());
        all_reduce(op, h);
        t.copy_(h);
        return;
      }
      comm().allreduce_raw(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
    }

   private:
    // Replica r sums share r of every gradient in replica order (into replica 0's: the bits do
    // not depend on which replica sums), then writes that sum into the other replicas'. A
    // gradient in rows on every replica is summed by rows, by each replica for itself.
    bool aggregate(Gradients g, double) override {
      STRATA_CHECK(sync_, "apply_gradients inside NoSync: the gradients would stay local to each replica");
      s_.to_host(r_);  // replicas on GPUs: their gradients come down, their headers back to the host
      const auto me = static_cast<std::size_t>(r_);
      s_.pending_[me] = g;
      RowScratch& mine = s_.rows_[me];
      std::vector<char>& mine_in_rows = mine.in_rows;
      mine_in_rows.assign(g.size(), 0);
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (g.params[i].has_row_grad())
          mine_in_rows[i] = 1;
        else
          (void)g[i];  // its own dense, before the others read it
      }
      comm().barrier();  // every replica's gradients are final
      // Where some replica's gradient of a table is dense, every replica makes its own dense.
      std::vector<char>& by_rows = mine.by_rows;
      by_rows.assign(g.size(), 0);
      bool mixed = false;
      for (std::size_t i = 0; i < g.size(); ++i) {
        int holding = 0;
        for (const RowScratch& q : s_.rows_) holding += q.in_rows[i];
        by_rows[i] = holding == s_.n_;
        if (holding > 0 && holding < s_.n_) {
          mixed = true;
          if (mine_in_rows[i]) (void)g[i];
        }
      }
      if (mixed) comm().barrier();
      const Gradients& g0 = s_.pending_[0];
      std::vector<RowGrad>& sums = mine.sums;
      sums.assign(g.size(), RowGrad{});
      for (std::size_t i = 0; i < g0.size(); ++i) {
        if (by_rows[i]) {
          sums[i] = mine.aggregation.combine(g.params[i], s_.pending_.size(), [&](std::size_t q) {
            const RowGrad part = s_.pending_[q].params[i].row_grad();
            return detail::RowAggregation::RowPart{part.size(), part.indices.template data<std::int64_t>(),
                                                   part.rows.raw_data()};
          });
          continue;
        }
        const Tensor dst = g0[i];
        const optim::ElementRange mine = s_.share(dst.numel(), r_);
        const auto count = static_cast<std::size_t>(mine.end - mine.begin);
        strata::detail::visit_floating(dst.dtype(), "apply_gradients", [&](auto tag) {
          using T = decltype(tag);
          auto share_of = [&](int q) {
            return s_.pending_[static_cast<std::size_t>(q)][i].template data<T>() + mine.begin;
          };
          T* d = share_of(0);
          for (int q = 1; q < s_.n_; ++q) collective::detail::combine<T>(ReduceOp::Sum, count, d, share_of(q));
          for (int q = 1; q < s_.n_; ++q) std::copy_n(d, count, share_of(q));
        });
      }
      comm().barrier();  // every replica's gradients hold the sum (the rows, once each has read all)
      for (std::size_t i = 0; i < g.size(); ++i)
        if (by_rows[i]) {
          auto& ag = g.params[i].impl()->ag;
          ag.grad_index = std::move(sums[i].indices);
          ag.grad_rows = std::move(sums[i].rows);
        }
      return true;
    }
    // Each replica its share where the optimizer can update ranges of the scope's model;
    // otherwise replica 0 updates all (the others share its variables).
    detail::UpdateLayout layout(const Gradients& g, optim::Optimizer& opt) override {
      if (opt.updates_ranges())
        for (const auto& split : s_.splits_)
          if (split->covers(r_, g)) {
            pending_ = split.get();
            if (pending_->begin(r_, opt)) return detail::UpdateLayout::share(pending_->ranges(r_, opt));
            break;
          }
      return r_ == 0 ? detail::UpdateLayout::whole() : detail::UpdateLayout::elsewhere();
    }
    void publish() override {
      if (detail::PartitionedUpdate* split = std::exchange(pending_, nullptr)) {
        split->publish(r_);  // the views share one storage: only the optimizer state is shared here
        split->end(r_);
      }
      comm().barrier();  // the central values are updated
    }
    void set_gradient_sync(bool on) override { sync_ = on; }

    collective::InProcess& comm() { return s_.comm(r_); }
    CentralStorageStrategy& s_;
    int r_;
    bool sync_ = true;
    detail::PartitionedUpdate* pending_ = nullptr;  // the split update this step's apply_gradients runs
  };

  // Replica r's share of a gradient or parameter of n elements: what it sums and updates.
  optim::ElementRange share(std::int64_t n, int r) const {
    return {data::detail::split_begin(n, r, this->n_), data::detail::split_begin(n, r + 1, this->n_)};
  }

  friend class detail::ThreadReplicas<CentralStorageStrategy>;

  template <class F>
  void with_context(int r, F&& f) {
    Context ctx(*this, r);
    if (on_devices_.empty()) return f(ctx);
    struct Back {  // a step that throws leaves the headers on the host too (its own error stands)
      CentralStorageStrategy& s;
      int r;
      bool armed = true;
      ~Back() {
        if (armed) try {
            s.to_host(r);
          } catch (...) {
          }
      }
    } back{*this, r};
    to_device(r);
    f(ctx);
    back.armed = false;
    to_host(r);  // a run without an update (an evaluation): back on the host as well
  }

  // A replica's buffer (batch norm statistics): its own, on the host outside run() like the
  // variables, and on its GPU inside.
  struct Buffer {
    Tensor header;  // what the model holds
    Tensor host;    // a view of its host storage
    Tensor copy;    // on the replica's GPU
  };
  // A model's variables for replicas on GPUs: the host's (central), each replica's parameter
  // headers, its device copy of the values and its host staging for the gradients.
  struct OnDevices {
    std::vector<Tensor> central;                   // views of the central storage
    std::vector<std::vector<Tensor>> headers;      // [replica][parameter]: what the model holds
    std::vector<std::vector<Tensor>> copies;       // [replica][parameter], on the replica's GPU
    std::vector<std::vector<Tensor>> staging;      // [replica][parameter], host
    std::vector<std::vector<Buffer>> buffers;      // [replica][buffer]
    std::vector<char> on_device;                   // [replica]: headers at the device copies
  };

  // Replica r's headers at its device copies, holding the central values of now (which the
  // last update, or the user between steps, wrote), with no gradient yet.
  void to_device(int r) {
    const auto ur = static_cast<std::size_t>(r);
    for (OnDevices& m : on_devices_) {
      for (std::size_t k = 0; k < m.central.size(); ++k) {
        Tensor dst = m.copies[ur][k];
        dst.copy_(m.central[k]);
        m.headers[ur][k].impl()->share_storage_of(*dst.impl());
        m.headers[ur][k].impl()->ag.grad = Tensor();
      }
      for (Buffer& b : m.buffers[ur]) {
        b.copy.copy_(b.host);
        b.header.impl()->share_storage_of(*b.copy.impl());
      }
      m.on_device[ur] = 1;
    }
  }
  // Replica r's headers back at the central storage, their device gradients copied to the
  // host staging, which becomes their gradient (what the CPU strategy's sums read).
  void to_host(int r) {
    const auto ur = static_cast<std::size_t>(r);
    for (OnDevices& m : on_devices_) {
      if (!m.on_device[ur]) continue;
      for (std::size_t k = 0; k < m.central.size(); ++k) {
        const Tensor& h = m.headers[ur][k];
        Tensor g = h.impl()->ag.grad;
        h.impl()->share_storage_of(*m.central[k].impl());
        if (g.defined()) {
          Tensor stage = m.staging[ur][k];
          stage.copy_(g);
          h.impl()->ag.grad = stage;
        }
      }
      for (Buffer& b : m.buffers[ur]) {  // what the step's forward passes wrote
        b.host.copy_(b.copy);
        b.header.impl()->share_storage_of(*b.host.impl());
      }
      m.on_device[ur] = 0;
    }
  }

  std::vector<Gradients> pending_;  // each replica's gradients in the step being applied
  // A replica's side of summing row-sparse tables, kept from step to step.
  struct RowScratch {
    std::vector<char> in_rows;   // per gradient: held in rows this step (every replica reads it)
    std::vector<char> by_rows;   // per gradient: summed by rows this step
    std::vector<RowGrad> sums;   // those sums, until every replica has read the rows
    detail::RowAggregation aggregation;
  };
  std::vector<RowScratch> rows_;
  std::vector<std::unique_ptr<detail::PartitionedUpdate>> splits_;  // one per model made under scope()
  std::vector<OnDevices> on_devices_;  // one per model made under scope(), replicas on GPUs only
};

template <class C>
inline constexpr bool enable_strategy<CentralStorageStrategy<C>> = true;

}  // namespace strata

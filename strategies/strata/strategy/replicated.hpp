/// \file
/// Replicated<T>: what scope() returns under a strategy with several replicas in one process —
/// one T per local replica, and every use resolves to the copy of the replica the calling
/// thread runs (replica 0 outside run()). So `model(x)`, `model.parameters()` and
/// `opt.apply_gradients(ctx, g)` in the training loop read the current replica's copy, as a
/// MirroredVariable does in tf.distribute, and the loop stays the same for every strategy.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/optim/loss_scale.hpp>  // LossScaleOptions
#include <strata/strategy/per_replica.hpp>
#include <strata/support/check.hpp>
#include <strata/support/replica_thread.hpp>  // current_local_replica

namespace strata {

/// One T per local replica, resolving to the calling replica's copy.
template <class T>
class Replicated {
 public:
  using element_type = T;

  explicit Replicated(std::vector<std::unique_ptr<T>> copies) : copies_(std::move(copies)) {
    STRATA_CHECK(!copies_.empty() && copies_.size() <= kMaxLocalReplicas, "Replicated: ", copies_.size(),
                 " copies (need 1..", kMaxLocalReplicas, ")");
  }
  Replicated(Replicated&&) noexcept = default;
  Replicated& operator=(Replicated&&) noexcept = default;

  std::size_t num_replicas() const noexcept { return copies_.size(); }
  /// The copy of local replica `r`.
  T& replica(std::size_t r) {
    STRATA_CHECK(r < copies_.size(), "replica ", r, " of ", copies_.size());
    return *copies_[r];
  }
  const T& replica(std::size_t r) const {
    STRATA_CHECK(r < copies_.size(), "replica ", r, " of ", copies_.size());
    return *copies_[r];
  }
  /// The calling replica's copy.
  T& local() { return replica(static_cast<std::size_t>(current_local_replica())); }
  const T& local() const { return replica(static_cast<std::size_t>(current_local_replica())); }

  T* operator->() { return &local(); }
  const T* operator->() const { return &local(); }
  T& operator*() { return local(); }
  const T& operator*() const { return local(); }
  operator T&() { return local(); }  // NOLINT: passes for a T& (e.g. a Module&) in user code
  operator const T&() const { return local(); }  // NOLINT

  // The members a training loop calls with `.`, forwarded to the current copy.
  template <class... A>
    requires std::invocable<T&, A...>
  decltype(auto) operator()(A&&... a) {
    return local()(std::forward<A>(a)...);
  }
  decltype(auto) parameters() const
    requires requires(const T& t) { t.parameters(); }
  {
    return local().parameters();
  }
  template <class Ctx, class G>
    requires requires(T& t, Ctx& c, G g) { t.apply_gradients(c, g); }
  void apply_gradients(Ctx& ctx, G grads) {
    local().apply_gradients(ctx, std::move(grads));
  }
  void train(bool on = true)
    requires requires(T& t) { t.train(on); }
  {
    for (auto& c : copies_) c->train(on);
  }
  void eval()
    requires requires(T& t) { t.eval(); }
  {
    for (auto& c : copies_) c->eval();
  }
  bool is_training() const
    requires requires(const T& t) { t.is_training(); }
  {
    return local().is_training();
  }
  double lr() const
    requires requires(const T& t) { t.lr(); }
  {
    return local().lr();
  }
  /// Sets every copy's learning rate.
  void set_lr(double lr)
    requires requires(T& t) { t.set_lr(lr); }
  {
    for (auto& c : copies_) c->set_lr(lr);
  }
  /// Gives every copy the learning-rate schedule `sched` (optim/schedule.hpp).
  template <class Sched>
  void set_schedule(const Sched& sched)
    requires requires(T& t) { t.set_schedule(sched); }
  {
    for (auto& c : copies_) c->set_schedule(sched);
  }
  /// Every copy's gradient clipping and transform (optim/gradient_transforms.hpp).
  void clip_by_global_norm(double max_norm)
    requires requires(T& t) { t.clip_by_global_norm(max_norm); }
  {
    for (auto& c : copies_) c->clip_by_global_norm(max_norm);
  }
  void clip_by_value(double max_abs)
    requires requires(T& t) { t.clip_by_value(max_abs); }
  {
    for (auto& c : copies_) c->clip_by_value(max_abs);
  }
  /// Every copy's rule for row-sparse tables (optim/optimizer.hpp).
  template <class S>
  void set_sparse_updates(S rule)
    requires requires(T& t) { t.set_sparse_updates(rule); }
  {
    for (auto& c : copies_) c->set_sparse_updates(rule);
  }
  template <class Fn>
  void set_gradient_transform(const Fn& fn)
    requires requires(T& t) { t.set_gradient_transform(fn); }
  {
    for (auto& c : copies_) c->set_gradient_transform(fn);
  }
  /// Every copy's loss scale (optim/loss_scale.hpp): the copies decide on the same aggregated
  /// gradients, so their scales stay equal.
  void set_loss_scale(const optim::LossScaleOptions& options = {})
    requires requires(T& t) { t.set_loss_scale(options); }
  {
    for (auto& c : copies_) c->set_loss_scale(options);
  }
  void clear_loss_scale()
    requires requires(T& t) { t.clear_loss_scale(); }
  {
    for (auto& c : copies_) c->clear_loss_scale();
  }
  /// The calling replica's loss times its copy's scale.
  template <class L>
  decltype(auto) scale_loss(const L& loss) const
    requires requires(const T& t) { t.scale_loss(loss); }
  {
    return local().scale_loss(loss);
  }
  decltype(auto) loss_scale() const
    requires requires(const T& t) { t.loss_scale(); }
  {
    return local().loss_scale();
  }

 private:
  std::vector<std::unique_ptr<T>> copies_;
};

}  // namespace strata

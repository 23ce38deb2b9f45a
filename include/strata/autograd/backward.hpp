/// \file
/// The backward sweep: backward(root) differentiates root with respect to every leaf that
/// requires gradients, writing each leaf's .grad() and firing its hooks as soon as that
/// gradient is final; grad(loss, params) is the same sweep returning the parameters' gradients.
///
/// Gradients are written fresh by each pass (tf.GradientTape semantics), unless the pass is
/// asked to accumulate into what earlier passes left (PyTorch semantics, for micro-batches).
#pragma once

#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include <strata/autograd/tape.hpp>    // Tape, Node, grad_slot
#include <strata/tensor/factory.hpp>   // ones

namespace strata {

/// Whether a backward pass overwrites leaf gradients or adds to them.
enum class GradAccumulation : bool { overwrite, accumulate };

namespace autograd::detail {

/// Leaf `leaf`'s gradient of pass `epoch` is zero (no path reached it; rows of an earlier
/// pass are not it): no rows for a row-sparse table, else a dense zero. A gradient whose
/// memory was given back (a view of a strategy's bucket between its uses: ShardedStrategy)
/// takes it again (take_memory_back).
inline void zero_gradient(const Tensor& leaf, std::uint64_t epoch) {
  auto& ag = leaf.impl()->ag;
  if (ag.row_sparse && leaf.ndim() >= 1 && leaf.device().kind == DeviceKind::cpu) {
    Shape rs = leaf.shape();
    rs[0] = 0;
    ag.grad_index = Tensor::empty(Shape{0}, DType::i64);
    ag.grad_rows = Tensor::empty(rs, leaf.dtype());
  } else {
    ag.grad_index = Tensor();
    ag.grad_rows = Tensor();
    if (!ag.grad.defined())
      ag.grad = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device());
    else if (memory_given_back(ag.grad))
      take_memory_back(ag.grad);
    ag.grad.fill_(0.0);
  }
  ag.grad_epoch = epoch;
}

/// The backward pass of a node whose output has no elements (a replica's share of a batch
/// that left it no rows): the output depends on no input element, so every input's gradient
/// through it is zero. Written here, once for every op, instead of by each op's backward
/// function, whose loops over the batch would write nothing and leave a buffer's stale values.
inline void pass_zeros(const Node& n, std::uint64_t epoch) {
  for (std::size_t k = 0; k < n.in.size(); ++k) {
    const Tensor& t = n.in[k];
    if (!t.defined() || !tracks_grad(t)) continue;
    bool seen = false;
    for (std::size_t j = 0; j < k; ++j) seen = seen || same_tensor(n.in[j], t);
    if (seen) continue;
    auto& ag = t.impl()->ag;
    if (t.is_leaf() && ag.row_sparse && t.device().kind == DeviceKind::cpu) {
      if (ag.grad_epoch != epoch) zero_gradient(t, epoch);  // no rows; rows written by another path stay
      continue;
    }
    if (GradSlot s = grad_slot(t, epoch); s && !s.accumulate) s.dst.fill_(0.0);
  }
}

inline void fire_hooks(const Tensor& leaf, std::uint64_t epoch) {
  auto& ag = leaf.impl()->ag;
  if (!ag.hooks) return;
  if (ag.grad_epoch != epoch || !(ag.grad.defined() || ag.grad_index.defined())) zero_gradient(leaf, epoch);
  const Tensor g = leaf.grad();  // hooks see it dense: a row-sparse one is scattered into its buffer
  for (auto& h : *ag.hooks) h(g);
}

/// Marks every leaf gradient that already exists as written in `epoch`, so the sweep adds.
inline void claim_existing_grads(Tape& tape, std::int32_t last, std::uint64_t epoch) {
  for (std::int32_t i = 0; i <= last; ++i)
    for (const Tensor& t : tape.nodes()[static_cast<std::size_t>(i)].in) {
      if (!t.defined() || !t.requires_grad() || !t.is_leaf()) continue;
      auto& ag = t.impl()->ag;
      if (ag.grad.defined() || ag.grad_index.defined()) ag.grad_epoch = epoch;  // dense or rows: added to
    }
}

}  // namespace autograd::detail

/// Differentiates `root` (seeded with `seed`, or with ones when `seed` is undefined) with
/// respect to every leaf that requires gradients, then clears this thread's tape.
/// Returns the pass's epoch (leaves written by this pass carry it).
inline std::uint64_t backward(const Tensor& root, const Tensor& seed = {},
                              GradAccumulation mode = GradAccumulation::overwrite) {
  using namespace autograd;
  Tape& tape = Tape::current();
  STRATA_CHECK(root.defined(), "backward() of an undefined tensor");
  STRATA_CHECK(tracks_grad(root) && !root.is_leaf(),
               "backward(): the tensor was not produced by a recorded operation on this thread (no input "
               "requires gradients, recording was off, or its tape was already consumed by a backward pass)");
  STRATA_CHECK(!seed.defined() || seed.shape() == root.shape(), "backward(): seed shape ", seed.shape(),
               " differs from root shape ", root.shape());
  const std::uint64_t epoch = autograd::detail::next_epoch();
  const std::int32_t last = root.impl()->ag.node;
  if (mode == GradAccumulation::accumulate) autograd::detail::claim_existing_grads(tape, last, epoch);
  {
    GradSlot s = grad_slot(root, epoch);
    if (seed.defined())
      s.dst.copy_(seed.dtype() == root.dtype() ? seed : to_dtype(seed, root.dtype()));
    else
      s.dst.fill_(1.0);
  }
  NoGradGuard no_grad;  // the backward functions themselves are never recorded
  auto& nodes = tape.nodes();
  try {
    for (std::int32_t i = last; i >= 0; --i) {
      Node& n = nodes[static_cast<std::size_t>(i)];
      auto& oag = n.out.impl()->ag;
      if (oag.grad_epoch == epoch && oag.grad.defined()) {
        if (n.out.numel() == 0 && !n.joins_replicas && !n.runs_without_gradient)
          autograd::detail::pass_zeros(n, epoch);
        else
          n.backward(n, epoch);
        oag.grad = Tensor();  // an intermediate's gradient is dead once its node has run
      } else if (n.runs_without_gradient) {
        n.backward(n, epoch);
      }
      // Fire the hooks of leaves whose first consumer this is: nothing earlier reads them.
      for (std::size_t k = 0; k < n.in.size(); ++k) {
        const Tensor& t = n.in[k];
        if (!t.defined() || !t.requires_grad() || !t.is_leaf()) continue;
        if (t.impl()->ag.first_use != i) continue;
        bool seen = false;
        for (std::size_t j = 0; j < k; ++j) seen = seen || same_tensor(n.in[j], t);
        if (!seen) autograd::detail::fire_hooks(t, epoch);
      }
    }
  } catch (...) {
    tape.clear();
    throw;
  }
  tape.clear();
  return epoch;
}

namespace autograd {
/// Gradients a strategy keeps in parts after backward (MirroredStrategy with
/// GradientLayout::sharded: each replica holds the sum in its own share only; ShardedStrategy:
/// each rank its block) or still being summed (buckets in flight on a communication thread),
/// and completes when they are read through Gradients. The strategy registers one on the
/// first parameter of the list it serves (set_gradient_completion); grad() asks it, once its
/// pass is done, whether that pass left the gradients in parts.
class GradientCompletion {
 public:
  /// Whether the backward pass just run on this thread left the gradients in parts, not yet
  /// handed to a Gradients (the next call says false until another pass does so).
  virtual bool claim() noexcept = 0;
  /// Makes every gradient of the parameter list whole; throws where it no longer can.
  virtual void make_whole() = 0;
  /// Whether the parts are shares of other replicas' memory, which none may change in place
  /// before every replica has read them (false: sums merely still in flight).
  virtual bool in_shares() const noexcept = 0;

 protected:
  ~GradientCompletion() = default;
};

/// Registers `c` (or none, with nullptr) as the completion of the parameter list whose first
/// tensor is `first`, a leaf that requires gradients.
inline void set_gradient_completion(const Tensor& first, GradientCompletion* c) {
  STRATA_CHECK(first.defined() && first.is_leaf() && first.requires_grad(),
               "gradient completions attach to leaf tensors that require gradients");
  first.impl()->ag.completion = c;
}
}  // namespace autograd

/// The parameters whose gradients a backward pass produced; each gradient is params[i].grad().
/// A view over the caller's parameter list: no copy, no allocation. Where a strategy keeps
/// the summed gradients in parts (GradientLayout::sharded), reading one through operator[]
/// first makes them whole.
struct Gradients {
  std::span<const Tensor> params;
  autograd::GradientCompletion* completion = nullptr;
  std::size_t size() const noexcept { return params.size(); }
  Tensor operator[](std::size_t i) const {
    make_whole();
    return params[i].grad();
  }
  /// Gradient i's rows where it is row-sparse (docs/design/sparse_tables.md), else undefined: read
  /// it before operator[], which makes it dense.
  RowGrad rows(std::size_t i) const {
    make_whole();
    return params[i].row_grad();
  }
  /// Every gradient whole (a no-op unless a strategy keeps them in parts).
  void make_whole() const {
    if (completion) completion->make_whole();
  }
  /// Whether these are the gradients of `list` (the same parameters, in its order): what a
  /// strategy checks before treating them as a model's it prepared for.
  bool of(std::span<const Tensor> list) const noexcept {
    return params.size() == list.size() && (list.empty() || same_tensor(params[0], list[0]));
  }
};

/// Differentiates `loss` with respect to `params` (every one gets a gradient; those `loss`
/// does not depend on get zeros: no rows, for a row-sparse table) and returns them.
///
/// @code
/// auto grads = strata::grad(loss, model.parameters());
/// optimizer.apply_gradients(ctx, grads);
/// @endcode
inline Gradients grad(const Tensor& loss, std::span<const Tensor> params,
                      GradAccumulation mode = GradAccumulation::overwrite) {
  STRATA_CHECK(loss.numel() == 1, "grad(): the loss must have one element, got shape ", loss.shape());
  for (const Tensor& p : params)
    STRATA_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "grad(): every parameter must be a leaf tensor "
                 "that requires gradients");
  const std::uint64_t epoch = backward(loss, {}, mode);
  for (const Tensor& p : params) {
    auto& ag = p.impl()->ag;
    const bool has = ag.grad.defined() || ag.grad_index.defined();  // dense or in rows
    if (ag.grad_epoch == epoch && has) continue;
    if (mode == GradAccumulation::accumulate && has) continue;
    autograd::detail::zero_gradient(p, epoch);
  }
  autograd::GradientCompletion* completion = params.empty() ? nullptr : params[0].impl()->ag.completion;
  return Gradients{params, completion && completion->claim() ? completion : nullptr};
}

/// Gradients is a view over the caller's list: a temporary list would be gone before the
/// view is read, so pass a list that outlives the result (model.parameters(), a named vector).
Gradients grad(const Tensor& loss, std::vector<Tensor>&& params, GradAccumulation mode = GradAccumulation::overwrite) =
    delete;

}  // namespace strata

/// \file
/// The define-by-run tape. Every differentiable operation whose inputs track gradients
/// appends a Node (its output, inputs, saved tensors and a plain function pointer for its
/// backward) to the tape of the calling thread. Threads never share a tape, so replicas on
/// threads record independently. Recording order is a topological order, so backward is a
/// single reverse sweep.
#pragma once

#include <algorithm>  // copy_n
#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>  // GradMode
#include <strata/kernels/cpu/rows.hpp>      // distinct_rows, sum_rows, scatter_add_rows
#include <strata/tensor/tensor.hpp>       // Tensor

namespace strata::autograd {

struct Node;
/// A node's backward: reads its output gradient, writes its inputs' gradients.
using BackwardFn = void (*)(Node&, std::uint64_t grad_epoch);

/// One recorded operation.
struct Node {
  BackwardFn backward = nullptr;
  const char* name = "";
  Tensor out;
  std::array<Tensor, 4> in;
  std::array<Tensor, 2> saved;
  std::array<double, 2> f{};
  std::array<std::int64_t, 6> i{};
  /// Whether the backward pass meets the other replicas (SyncBatchNorm's sums): it then runs
  /// even for an empty output, where every other node only passes zeros on.
  bool joins_replicas = false;
  /// Whether the backward pass runs this node even where its output got no gradient (then
  /// undefined): a callback that must run as backward reaches its place (backward_callback.hpp).
  bool runs_without_gradient = false;
};

namespace detail {
/// A process-wide counter, so that epochs of different tapes and backward passes never collide.
inline std::uint64_t next_epoch() noexcept {
  static std::atomic<std::uint64_t> counter{0};
  return ++counter;
}
}  // namespace detail

/// The tape of the calling thread.
class Tape {
 public:
  static Tape& current() noexcept {
    thread_local Tape tape;
    return tape;
  }

  std::uint64_t epoch() const noexcept { return epoch_; }
  std::vector<Node>& nodes() noexcept { return nodes_; }
  std::size_t size() const noexcept { return nodes_.size(); }

  /// Drops every node (keeping the capacity, so the next step records without allocating).
  void clear() noexcept {
    nodes_.clear();
    epoch_ = detail::next_epoch();
  }

 private:
  Tape() { nodes_.reserve(256); }
  std::vector<Node> nodes_;
  std::uint64_t epoch_ = detail::next_epoch();
};

/// True if gradients flow into `t`: a leaf that requires them, or the output of a node on the
/// calling thread's live tape.
inline bool tracks_grad(const Tensor& t) noexcept {
  if (!t.requires_grad()) return false;
  const auto& ag = t.impl()->ag;
  return ag.node < 0 || ag.node_epoch == Tape::current().epoch();
}

/// Appends a node for `out` if recording is on and any input tracks gradients; returns it (or
/// nullptr when nothing was recorded, and the caller need not save anything).
inline Node* record(const char* name, BackwardFn fn, const Tensor& out, const Tensor& a, const Tensor& b = {},
                    const Tensor& c = {}, const Tensor& d = {}) {
  if (!GradMode::enabled()) return nullptr;
  if (!tracks_grad(a) && !tracks_grad(b) && !tracks_grad(c) && !tracks_grad(d)) return nullptr;
  Tape& tape = Tape::current();
  const auto idx = static_cast<std::int32_t>(tape.size());
  Node& n = tape.nodes().emplace_back();
  n.backward = fn;
  n.name = name;
  n.out = out;
  n.in = {a, b, c, d};
  auto& oag = out.impl()->ag;
  oag.requires_grad = true;
  oag.node = idx;
  oag.node_epoch = tape.epoch();
  for (const Tensor& t : n.in) {
    if (!t.defined() || !t.requires_grad() || !t.is_leaf()) continue;
    auto& ag = t.impl()->ag;
    if (ag.first_use_epoch != tape.epoch()) {
      ag.first_use = idx;
      ag.first_use_epoch = tape.epoch();
    }
  }
  return &n;
}

/// Where one input's gradient goes in the current backward pass: `dst` (shaped like the
/// input) and whether to add to it (another path already wrote it) or overwrite it.
struct GradSlot {
  Tensor dst;
  bool accumulate = false;
  explicit operator bool() const noexcept { return dst.defined(); }
};

/// The slot for `t` in backward pass `epoch`, or an empty slot if `t` needs no gradient.
/// A leaf keeps its gradient buffer across passes, so steady-state steps reuse it.
/// Whether `g` is a view whose memory was given back (a strategy's bucket between its uses).
inline bool memory_given_back(const Tensor& g) noexcept { return g.numel() > 0 && g.raw_data() == nullptr; }

/// A gradient view whose memory was given back takes it again, zeros throughout: its
/// storage's other views (the bucket's other gradients, its padding) read zeros until they are
/// written, as they would after the strategy's own take. Backward then writes the gradient in
/// its bucket slot, with no tensor of its own to copy in when it is final.
inline void take_memory_back(const Tensor& g) {
  strata::detail::StorageImpl* st = g.impl()->storage();
  st->take_memory();
  const auto whole = static_cast<std::int64_t>(st->nbytes() / size_of(g.dtype()));
  strata::detail::make_view(g, Shape{whole}, Shape{1}, 0).fill_(0.0);
}

inline GradSlot grad_slot(const Tensor& t, std::uint64_t epoch) {
  if (!t.defined() || !tracks_grad(t)) return {};
  auto& ag = t.impl()->ag;
  if (ag.grad_index.defined()) {  // a row-sparse gradient: this pass's is made dense, an older one dropped
    if (ag.grad_epoch == epoch) return {t.grad(), true};
    ag.grad_index = Tensor();
    ag.grad_rows = Tensor();
  }
  if (ag.grad_epoch == epoch && ag.grad.defined()) return {ag.grad, true};
  // A tensor moved in place (Module::to) gets its gradient where it now is; one whose gradient's
  // memory was given back (a view of ShardedStrategy's bucket between uses) takes it again.
  if (!ag.grad.defined() || !(ag.grad.shape() == t.shape()) || ag.grad.dtype() != t.dtype() ||
      ag.grad.device() != t.device())
    ag.grad = Tensor::empty(t.shape(), t.dtype(), t.device());
  else if (memory_given_back(ag.grad))
    take_memory_back(ag.grad);
  ag.grad_epoch = epoch;
  return {ag.grad, false};
}

/// Hands `g` itself to `t` as its gradient in pass `epoch`, instead of a copy: an addition's
/// or a reshape's backward passes its output gradient on (PyTorch's AddBackward does the
/// same). Only where nothing has written t's gradient in this pass yet and t is not a leaf (a
/// leaf keeps its own buffer across passes); `g` must be the running node's output gradient,
/// which the engine drops once the node has run, so t's gradient has one owner again. False
/// (and nothing done) where it cannot: take grad_slot then.
inline bool pass_gradient(const Tensor& t, const Tensor& g, std::uint64_t epoch) {
  if (!t.defined() || !tracks_grad(t) || t.is_leaf() || !g.is_contiguous()) return false;
  auto& ag = t.impl()->ag;
  if (ag.grad_epoch == epoch && ag.grad.defined()) return false;  // another path wrote it: add to it
  if (!(g.shape() == t.shape()) || g.dtype() != t.dtype() || g.device() != t.device()) return false;
  ag.grad = g;
  ag.grad_epoch = epoch;
  return true;
}

/// Adds rows to `t`'s gradient in pass `epoch`: row index[j] of the gradient gains rows[j]
/// (`width` values each; t is [V, ...] with V * width elements). A leaf keeps them as a
/// row-sparse gradient, its duplicates combined (docs/design/sparse_tables.md); where the gradient
/// is already dense in this pass, or t is not a leaf, they are added into the dense one.
template <class T, class I>
void add_grad_rows(const Tensor& t, std::uint64_t epoch, std::int64_t n, std::int64_t width, const I* index,
                   const T* rows) {
  if (!t.defined() || !tracks_grad(t)) return;
  auto& ag = t.impl()->ag;
  const bool rows_now = ag.grad_index.defined() && ag.grad_epoch == epoch;
  if (!t.is_leaf() || (!rows_now && ag.grad_epoch == epoch && ag.grad.defined())) {
    GradSlot s = grad_slot(t, epoch);
    if (!s.accumulate) s.dst.fill_(0.0);
    kernels::cpu::scatter_add_rows<T>(n, width, index, rows, s.dst.template data<T>());
    return;
  }
  thread_local std::vector<std::int64_t> slot;  // by row number: -1 between calls
  thread_local std::vector<std::int64_t> out_index;
  std::vector<std::int64_t> all_index;  // a second lookup in this pass: the rows so far, then the new ones
  std::vector<T> all_rows;
  if (rows_now) {
    const std::int64_t had = ag.grad_index.numel();
    all_index.resize(static_cast<std::size_t>(had + n));
    all_rows.resize(static_cast<std::size_t>((had + n) * width));
    // (copy_n, not memcpy: an empty tensor's data may be null)
    std::copy_n(ag.grad_index.template data<std::int64_t>(), had, all_index.begin());
    for (std::int64_t j = 0; j < n; ++j) all_index[static_cast<std::size_t>(had + j)] = static_cast<std::int64_t>(index[j]);
    std::copy_n(ag.grad_rows.template data<T>(), had * width, all_rows.begin());
    std::copy_n(rows, n * width, all_rows.begin() + had * width);
  }
  auto coalesce = [&](std::int64_t count, const auto* ix, const T* rs) {
    const std::int64_t k = kernels::cpu::distinct_rows(count, ix, slot, out_index);
    Shape shape = t.shape();
    shape[0] = k;
    Tensor gi = Tensor::empty({k}, DType::i64), gr = Tensor::empty(shape, t.dtype());
    std::copy_n(out_index.data(), k, gi.template data<std::int64_t>());
    kernels::cpu::sum_rows<T>(count, width, ix, rs, slot, out_index, gr.template data<T>());
    return std::pair{std::move(gi), std::move(gr)};
  };
  auto [gi, gr] = rows_now ? coalesce(static_cast<std::int64_t>(all_index.size()), all_index.data(), all_rows.data())
                           : coalesce(n, index, rows);
  ag.grad_index = std::move(gi);
  ag.grad_rows = std::move(gr);
  ag.grad_epoch = epoch;
}

/// The gradient flowing into node `n`'s output.
inline const Tensor& grad_output(const Node& n) noexcept { return n.out.impl()->ag.grad; }

}  // namespace strata::autograd

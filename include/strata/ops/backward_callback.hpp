/// \file
/// call_in_backward(x, cb): x itself (the same elements, a new tensor) whose node calls
/// cb.on_backward() when the backward pass reaches it — after the nodes recorded later, before
/// those recorded earlier — and passes the gradient on unchanged. The call happens even where
/// no gradient reached x, so a strategy can prepare what the earlier nodes will read
/// (ShardedStrategy gathers a wrap unit's parameters there before the unit's backward).
#pragma once

#include <cstdint>

#include <strata/autograd/grad_mode.hpp>
#include <strata/autograd/tape.hpp>
#include <strata/ops/shape_ops.hpp>  // reshape_backward: the same elements, passed on
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace autograd {
/// What call_in_backward calls; it must outlive the backward pass of the tape it is on.
class BackwardCallback {
 public:
  virtual ~BackwardCallback() = default;
  virtual void on_backward() = 0;
};
}  // namespace autograd

namespace ops::detail {
inline void callback_backward(autograd::Node& n, std::uint64_t epoch) {
  reinterpret_cast<autograd::BackwardCallback*>(static_cast<std::intptr_t>(n.i[0]))->on_backward();
  if (autograd::grad_output(n).defined()) reshape_backward(n, epoch);
}
}  // namespace ops::detail

/// `x`, recorded so that the backward pass calls `cb.on_backward()` at this point (nothing is
/// recorded, and `x` is returned, where no gradient is being recorded).
inline Tensor call_in_backward(const Tensor& x, autograd::BackwardCallback& cb) {
  STRATA_CHECK(x.defined(), "call_in_backward of an undefined tensor");
  if (!GradMode::enabled() || !autograd::tracks_grad(x)) return x;
  Tensor c = x.contiguous();
  Tensor out = strata::detail::make_view(c, c.shape(), contiguous_strides(c.shape()), c.impl()->offset());
  autograd::Node* n = autograd::record("call_in_backward", &ops::detail::callback_backward, out, x);
  n->i[0] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&cb));
  n->runs_without_gradient = true;
  return out;
}

}  // namespace strata

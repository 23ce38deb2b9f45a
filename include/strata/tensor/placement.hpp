/// \file
/// Moving tensors between devices in place: every handle to a moved tensor (a model's, an
/// optimizer's) names the moved values afterwards, as PyTorch's Module.to(device) leaves them.
#pragma once

#include <span>

#include <strata/tensor/tensor.hpp>

namespace strata {

/// Moves each of `tensors` to `device`, keeping each one's identity and autograd flags; a
/// gradient it held is dropped (the next backward makes one on the new device).
inline void move_in_place(std::span<const Tensor> tensors, Device device) {
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.device() == device) continue;
    const Tensor moved = t.to(device);
    t.impl()->share_storage_of(*moved.impl());
    t.impl()->ag.grad = Tensor();
  }
}

}  // namespace strata

/// \file
/// Inverted dropout: in training, each element is zeroed with probability p and the rest are
/// scaled by 1/(1-p), from a seeded Generator; in evaluation it is the identity.
#pragma once

#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/factory.hpp>         // ones
#include <strata/tensor/random.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {
inline void dropout_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  if (on_device(n.out)) {  // d (+)= g * mask: the gradient of g * mask with respect to g
    const Tensor& g = autograd::grad_output(n);
    device_kernels("dropout", g, n.saved[0])
        .binary_backward(g.device().index, g.dtype(), kernels::math::BinaryKind::mul, 0, g.numel(), g.raw_data(),
                         nullptr, n.saved[0].raw_data(), s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* g = autograd::grad_output(n).template data<T>();
    const T* m = n.saved[0].template data<T>();
    T* d = s.dst.template data<T>();
    for (std::int64_t i = 0, cnt = n.out.numel(); i < cnt; ++i) d[i] = s.accumulate ? d[i] + g[i] * m[i] : g[i] * m[i];
  });
}
}  // namespace ops::detail

/// Zeroes each element of `x` with probability `p` (drawn from `gen`) and scales survivors by
/// 1/(1-p); returns `x` itself when `training` is false or p == 0.
inline Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true) {
  STRATA_CHECK(x.defined(), "dropout of an undefined tensor");
  STRATA_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  if (on_device(x)) {
    // The mask is drawn on the host from the same generator, so a device run drops exactly
    // the elements a CPU run drops; one copy of it goes to the device.
    Tensor mask = dropout(ones(x.shape(), x.dtype()), p, gen, true).detach().to(x.device());
    Tensor xc = x.contiguous();
    Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
    device_kernels("dropout", x).binary(x.device().index, x.dtype(), kernels::math::BinaryKind::mul, x.numel(),
                                        xc.raw_data(), mask.raw_data(), out.raw_data());
    if (auto* n = autograd::record("dropout", &ops::detail::dropout_backward, out, x)) n->saved[0] = mask;
    return out;
  }
  Tensor xc = x.contiguous();
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  strata::detail::visit_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    const T* xp = xc.template data<T>();
    T* m = mask.template data<T>();
    T* o = out.template data<T>();
    for (std::int64_t i = 0, cnt = x.numel(); i < cnt; ++i) {
      m[i] = gen.uniform() < p ? T(0) : keep;
      o[i] = xp[i] * m[i];
    }
  });
  if (auto* n = autograd::record("dropout", &ops::detail::dropout_backward, out, x)) n->saved[0] = mask;
  return out;
}

}  // namespace strata

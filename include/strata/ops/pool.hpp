/// \file
/// Differentiable 2-D pooling over NCHW: max pooling, average pooling, and the global average
/// over each plane.
#pragma once

#include <cstdint>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/pool.hpp>  // max/avg_pool2d_forward/backward
#include <strata/ops/reduce.hpp>        // mean: the global average
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

/// Checks a pooling's arguments (stride 0 meaning the window) and returns its geometry.
inline kernels::cpu::PoolGeometry pool_geometry(const char* op, const Tensor& x, std::int64_t kernel,
                                                std::int64_t stride, std::int64_t padding) {
  STRATA_CHECK(x.defined() && x.ndim() == 4, op, " needs x [N, C, H, W], got ", x.shape());
  if (stride == 0) stride = kernel;
  STRATA_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && 2 * padding <= kernel, op, ": kernel ", kernel,
               ", stride ", stride, ", padding ", padding, " are invalid");
  STRATA_CHECK(x.dim(2) + 2 * padding >= kernel && x.dim(3) + 2 * padding >= kernel, op, ": window ", kernel,
               " larger than the input ", x.shape());
  return {x.dim(0) * x.dim(1), x.dim(2), x.dim(3), kernel, stride, padding};
}

inline void max_pool2d_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor& x = n.in[0];
  const kernels::cpu::PoolGeometry geo{x.dim(0) * x.dim(1), x.dim(2), x.dim(3), n.i[0], n.i[1], n.i[2]};
  if (on_device(x)) {
    const Tensor& g = autograd::grad_output(n);
    device_kernels("max_pool2d", x, g).max_pool_backward(x.device().index, x.dtype(), geo, g.raw_data(),
                                                         n.saved[0].device_data<std::int32_t>(), s.dst.raw_data(),
                                                         s.accumulate);
    return;
  }
  strata::detail::visit_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::max_pool2d_backward<T>(geo, autograd::grad_output(n).template data<T>(),
                                         n.saved[0].template data<std::int32_t>(), s.dst.template data<T>(),
                                         s.accumulate);
  });
}

inline void avg_pool2d_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor& x = n.in[0];
  const kernels::cpu::PoolGeometry geo{x.dim(0) * x.dim(1), x.dim(2), x.dim(3), n.i[0], n.i[1], n.i[2]};
  if (on_device(x)) {
    const Tensor& g = autograd::grad_output(n);
    device_kernels("avg_pool2d", g, s.dst).avg_pool_backward(x.device().index, x.dtype(), geo, g.raw_data(),
                                                             s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::avg_pool2d_backward<T>(geo, autograd::grad_output(n).template data<T>(), s.dst.template data<T>(),
                                         s.accumulate);
  });
}

}  // namespace ops::detail

/// 2-D max pooling over x [N, C, H, W] with a square window; stride defaults to the window.
inline Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0) {
  Tensor xc = x.contiguous();
  const auto geo = ops::detail::pool_geometry("max_pool2d", x, kernel, stride, padding);
  Tensor out = Tensor::empty({x.dim(0), x.dim(1), geo.oh(), geo.ow()}, x.dtype(), x.device());
  Tensor arg = Tensor::empty(out.shape(), DType::i32, x.device());
  if (on_device(x))
    device_kernels("max_pool2d", x).max_pool_forward(x.device().index, x.dtype(), geo, xc.raw_data(), out.raw_data(),
                                                     arg.device_data<std::int32_t>());
  else
    strata::detail::visit_floating(x.dtype(), "max_pool2d", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::max_pool2d_forward<T>(geo, xc.template data<T>(), out.template data<T>(),
                                          arg.template data<std::int32_t>());
    });
  if (auto* n = autograd::record("max_pool2d", &ops::detail::max_pool2d_backward, out, x)) {
    n->saved[0] = arg;
    n->i = {geo.k, geo.stride, geo.pad, 0, 0, 0};
  }
  return out;
}

/// 2-D average pooling over x [N, C, H, W] with a square window (stride defaults to the window);
/// padding counts as zeros in each window's k * k divisor (PyTorch's count_include_pad).
inline Tensor avg_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0) {
  const auto geo = ops::detail::pool_geometry("avg_pool2d", x, kernel, stride, padding);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({x.dim(0), x.dim(1), geo.oh(), geo.ow()}, x.dtype(), x.device());
  if (on_device(x))
    device_kernels("avg_pool2d", x).avg_pool_forward(x.device().index, x.dtype(), geo, xc.raw_data(), out.raw_data());
  else
    strata::detail::visit_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::avg_pool2d_forward<T>(geo, xc.template data<T>(), out.template data<T>());
    });
  if (auto* n = autograd::record("avg_pool2d", &ops::detail::avg_pool2d_backward, out, x))
    n->i = {geo.k, geo.stride, geo.pad, 0, 0, 0};
  return out;
}

/// The mean of each plane of x [N, C, H, W]: [N, C] (a ResNet's head).
inline Tensor global_avg_pool2d(const Tensor& x) {
  STRATA_CHECK(x.defined() && x.ndim() == 4, "global_avg_pool2d needs x [N, C, H, W], got ", x.shape());
  return mean(x, {2, 3});
}

}  // namespace strata

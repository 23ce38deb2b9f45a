/// \file
/// Differentiable reductions: sum and mean over all axes or over a set of axes.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <strata/autograd/tape.hpp>
#include <strata/ops/detail/strided.hpp>
#include <strata/ops/linalg.hpp>      // matmul: partial reductions on a device
#include <strata/ops/shape_ops.hpp>   // reshape
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

/// The shape after reducing the axes in `mask`, keeping them as extent 1.
inline Shape reduced_shape_keepdim(const Shape& s, std::uint32_t mask) {
  Shape out = s;
  for (int i = 0; i < s.ndim(); ++i)
    if (mask & (1u << i)) out[i] = 1;
  return out;
}
inline Shape drop_axes(const Shape& s, std::uint32_t mask) {
  Shape out;
  for (int i = 0; i < s.ndim(); ++i)
    if (!(mask & (1u << i))) out.push_back(s[i]);
  return out;
}

inline void sum_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const auto mask = static_cast<std::uint32_t>(n.i[0]);
  const double scale = n.f[0];
  const Shape& xs = n.in[0].shape();
  const Shape keep = reduced_shape_keepdim(xs, mask);
  if (on_device(n.out)) {  // only full reductions record this node on a device
    const Tensor& g = autograd::grad_output(n);
    device_kernels(n.name, g, s.dst).spread_scalar(g.device().index, g.dtype(), xs.numel(), g.raw_data(), scale,
                                                   s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* g = autograd::grad_output(n).template data<T>();
    T* d = s.dst.template data<T>();
    const T sc = static_cast<T>(scale);
    const std::array<Shape, 2> st{contiguous_strides(xs),
                                  strata::detail::broadcast_strides(keep, contiguous_strides(keep), xs)};
    const bool acc = s.accumulate;
    strata::detail::for_each_row<2>(xs, st, [&](const auto& o, std::int64_t n, const auto& in) {
      T* y = d + o[0];
      const T* x = g + o[1];
      strata::detail::with_unit_stride(in[1], [&](auto sg) {  // 0 where the run was summed away
        using strata::detail::at;
        if (acc)
          for (std::int64_t j = 0; j < n; ++j) y[j] += sc * x[at(j, sg, in[1])];
        else
          for (std::int64_t j = 0; j < n; ++j) y[j] = sc * x[at(j, sg, in[1])];
      });
    });
  });
}

/// A reduction over leading or trailing axes on a device, as one GEMM with a vector of
/// `scale`: x [outer, inner] times a column (trailing axes), or a row times x (leading axes).
/// Its gradient is the GEMM's. Undefined when the axes are neither.
inline Tensor device_partial_sum(const Tensor& x, std::uint32_t mask, bool keepdim, double scale) {
  const Shape& xs = x.shape();
  int first = -1, last = -1;
  for (int i = 0; i < xs.ndim(); ++i)
    if (mask & (1u << i)) {
      if (first < 0) first = i;
      last = i;
    }
  if (first < 0 || mask != (((2u << last) - 1) & ~((1u << first) - 1))) return {};  // not one run of axes
  const bool trailing = last == xs.ndim() - 1;
  if (!trailing && first != 0) return {};
  const int split = trailing ? first : last + 1;  // x as [outer, inner] at this axis
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < xs.ndim(); ++i) (i < split ? outer : inner) *= xs[i];
  Tensor ones_vec = Tensor::empty(trailing ? Shape{inner, 1} : Shape{1, outer}, x.dtype(), x.device());
  ones_vec.fill_(scale);
  const Tensor m = reshape(x, {outer, inner});
  const Tensor r = trailing ? matmul(m, ones_vec) : matmul(ones_vec, m);
  return reshape(r, keepdim ? reduced_shape_keepdim(xs, mask) : drop_axes(xs, mask));
}

inline Tensor sum_impl(const char* name, const Tensor& x, std::uint32_t mask, bool keepdim, double scale) {
  STRATA_CHECK(x.defined(), name, ": undefined operand");
  const Shape& xs = x.shape();
  const Shape keep = reduced_shape_keepdim(xs, mask);
  if (on_device(x) && keep.numel() != 1) {
    Tensor r = device_partial_sum(x, mask, keepdim, scale);
    if (!r.defined())
      unsupported_on_device(name, x.device(), "a reduction runs there over all axes, or over leading or trailing ones");
    return r;
  }
  Tensor out = Tensor::empty(keepdim ? keep : drop_axes(xs, mask), x.dtype(), x.device());
  if (on_device(x)) {
    Tensor xc = x.contiguous();
    device_kernels(name, x).sum(x.device().index, x.dtype(), x.numel(), xc.raw_data(), out.raw_data(), scale, false);
  } else {
    strata::detail::visit_floating(x.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      const T* p = static_cast<const T*>(x.raw_data());
      T* o = out.data<T>();
      if (keep.numel() == 1) {  // full reduction: accumulate in double for accuracy
        double acc = 0;
        strata::detail::for_each_strided<1>(xs, {x.strides()}, [&](const auto& off) { acc += p[off[0]]; });
        o[0] = static_cast<T>(acc * scale);
        return;
      }
      for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = T(0);
      const std::array<Shape, 2> st{x.strides(), strata::detail::broadcast_strides(keep, contiguous_strides(keep), xs)};
      strata::detail::for_each_row<2>(xs, st, [&](const auto& off, std::int64_t n, const auto& in) {
        const T* x = p + off[0];
        T* y = o + off[1];
        strata::detail::with_unit_stride(in[0], [&](auto sx) {
          using strata::detail::at;
          if (in[1] == 0) {  // the run is summed away: in 8 lanes (which vectorise), then across them
            T lane[8] = {};
            std::int64_t j = 0;
            for (; j + 8 <= n; j += 8)
              for (int l = 0; l < 8; ++l) lane[l] += x[at(j + l, sx, in[0])];
            T acc = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
            for (; j < n; ++j) acc += x[at(j, sx, in[0])];
            y[0] += acc;
          } else {
            for (std::int64_t j = 0; j < n; ++j) y[j] += x[at(j, sx, in[0])];
          }
        });
      });
      if (scale != 1.0)
        for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(o[i] * scale);
    });
  }
  if (auto* node = autograd::record(name, &sum_backward, out, x)) {
    node->i[0] = mask;
    node->f[0] = scale;
  }
  return out;
}

inline std::uint32_t axes_mask(const Shape& s, std::initializer_list<int> axes) {
  std::uint32_t m = 0;
  for (int a : axes) m |= 1u << s.normalize_axis(a);
  return m;
}

}  // namespace ops::detail

/// Sum of all elements (a 0-d tensor).
inline Tensor sum(const Tensor& x) {
  return ops::detail::sum_impl("sum", x, (1u << x.ndim()) - 1, false, 1.0);
}
/// Sum over `axes` (negative counts from the end); `keepdim` keeps them with extent 1.
inline Tensor sum(const Tensor& x, std::initializer_list<int> axes, bool keepdim = false) {
  return ops::detail::sum_impl("sum", x, ops::detail::axes_mask(x.shape(), axes), keepdim, 1.0);
}
/// Mean of all elements.
inline Tensor mean(const Tensor& x) {
  STRATA_CHECK(x.numel() > 0, "mean of an empty tensor");
  return ops::detail::sum_impl("mean", x, (1u << x.ndim()) - 1, false, 1.0 / static_cast<double>(x.numel()));
}
/// Mean over `axes`.
inline Tensor mean(const Tensor& x, std::initializer_list<int> axes, bool keepdim = false) {
  const auto mask = ops::detail::axes_mask(x.shape(), axes);
  std::int64_t count = 1;
  for (int i = 0; i < x.ndim(); ++i)
    if (mask & (1u << i)) count *= x.shape()[i];
  STRATA_CHECK(count > 0, "mean over empty axes");
  return ops::detail::sum_impl("mean", x, mask, keepdim, 1.0 / static_cast<double>(count));
}

}  // namespace strata

/// \file
/// Differentiable joining and cutting along one axis: concat, slice and split.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include <strata/autograd/tape.hpp>
#include <strata/ops/detail/strided.hpp>     // for_each_strided
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace ops::detail {

/// dst (+)= src over `shape`, each read or written through its own element strides (pointers
/// already at the first element).
template <class T>
void copy_strided(const Shape& shape, const T* src, const Shape& src_strides, T* dst, const Shape& dst_strides,
                  bool accumulate) {
  const std::array<Shape, 2> st{src_strides, dst_strides};
  if (accumulate)
    strata::detail::for_each_strided<2>(shape, st, [&](const auto& o) { dst[o[1]] += src[o[0]]; });
  else
    strata::detail::for_each_strided<2>(shape, st, [&](const auto& o) { dst[o[1]] = src[o[0]]; });
}

/// dst (+)= src over `shape` through strides, as copy_strided, for tensors on the host or a
/// device (pointers `src_at`/`dst_at` elements into the tensors' data).
inline void copy_part(const Shape& shape, const Tensor& src, std::int64_t src_at, const Shape& src_strides,
                      const Tensor& dst, std::int64_t dst_at, const Shape& dst_strides, bool accumulate) {
  if (on_device(dst)) {
    const auto es = static_cast<std::int64_t>(size_of(dst.dtype()));
    device_kernels("concat", src, dst)
        .copy_strided(dst.device().index, dst.dtype(), shape, static_cast<const char*>(src.raw_data()) + src_at * es,
                      src_strides, static_cast<char*>(dst.raw_data()) + dst_at * es, dst_strides, accumulate);
    return;
  }
  strata::detail::visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    copy_strided<T>(shape, static_cast<const T*>(src.raw_data()) + src_at, src_strides,
                    static_cast<T*>(dst.raw_data()) + dst_at, dst_strides, accumulate);
  });
}

/// The part [start, start + extent) along `axis` of a contiguous tensor of shape `whole`:
/// its shape and its element offset (its strides are the whole's).
inline std::pair<Shape, std::int64_t> part_of(const Shape& whole, int axis, std::int64_t start, std::int64_t extent) {
  Shape s = whole;
  s[axis] = extent;
  return {s, start * contiguous_strides(whole)[axis]};
}

/// Input k's gradient is the part of the output's gradient it filled (offsets in n.i[1..3]).
inline void concat_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const int axis = static_cast<int>(n.i[0]);
  for (std::size_t k = 0; k < n.in.size(); ++k) {
    auto s = autograd::grad_slot(n.in[k], epoch);
    if (!s) continue;
    const auto [shape, offset] = part_of(g.shape(), axis, n.i[k + 1], n.in[k].dim(axis));
    copy_part(shape, g, offset, contiguous_strides(g.shape()), s.dst, 0, contiguous_strides(shape), s.accumulate);
  }
}

/// Concatenates up to three tensors (one tape node).
inline Tensor concat_node(std::span<const Tensor> xs, int axis) {
  Shape shape = xs[0].shape();
  shape[axis] = 0;
  for (const Tensor& x : xs) shape[axis] += x.dim(axis);
  Tensor out = Tensor::empty(shape, xs[0].dtype(), xs[0].device());
  std::array<std::int64_t, 3> starts{};
  std::int64_t at = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const auto [part, offset] = part_of(shape, axis, at, xs[k].dim(axis));
    copy_part(part, xs[k], 0, xs[k].strides(), out, offset, contiguous_strides(shape), false);
    starts[k] = at;
    at += xs[k].dim(axis);
  }
  if (is_floating(out.dtype()))
    if (auto* n = autograd::record("concat", &concat_backward, out, xs[0], xs.size() > 1 ? xs[1] : Tensor(),
                                   xs.size() > 2 ? xs[2] : Tensor())) {
      n->i[0] = axis;
      for (std::size_t k = 0; k < 3; ++k) n->i[k + 1] = starts[k];
    }
  return out;
}

/// The slice's gradient fills its part of the input's gradient; the rest is zero (or, when
/// accumulating, unchanged).
inline void slice_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  const Tensor& g = autograd::grad_output(n);
  const int axis = static_cast<int>(n.i[0]);
  if (!s.accumulate) s.dst.fill_(0.0);
  const auto [shape, offset] = part_of(s.dst.shape(), axis, n.i[1], g.dim(axis));
  copy_part(shape, g, 0, contiguous_strides(shape), s.dst, offset, contiguous_strides(s.dst.shape()), true);
}

}  // namespace ops::detail

/// The tensors joined along `axis` (negative counts from the end); every other extent must
/// agree. A new contiguous tensor, on the tensors' device.
inline Tensor concat(std::span<const Tensor> xs, int axis) {
  STRATA_CHECK(!xs.empty(), "concat of no tensors");
  STRATA_CHECK(xs[0].defined(), "concat: tensor 0 is undefined");
  const int a = xs[0].shape().normalize_axis(axis);
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    STRATA_CHECK(x.defined(), "concat: tensor ", k, " is undefined");
    STRATA_CHECK(x.device() == xs[0].device(), "concat: tensor ", k, " is on ", x.device(), ", tensor 0 on ",
                 xs[0].device(), "; move them with to()");
    STRATA_CHECK(x.dtype() == xs[0].dtype(), "concat: tensor ", k, " is ", x.dtype(), ", tensor 0 is ", xs[0].dtype());
    bool same = x.ndim() == xs[0].ndim();
    for (int i = 0; same && i < x.ndim(); ++i) same = i == a || x.dim(i) == xs[0].dim(i);
    STRATA_CHECK(same, "concat along axis ", axis, ": tensor ", k, " has shape ", x.shape(), ", tensor 0 has ",
                 xs[0].shape());
  }
  // One node takes three inputs; a longer list folds left, two more inputs per node.
  Tensor acc = ops::detail::concat_node(xs.first(std::min<std::size_t>(3, xs.size())), a);
  for (std::size_t k = 3; k < xs.size(); k += 2) {
    const std::array<Tensor, 3> next{acc, xs[k], k + 1 < xs.size() ? xs[k + 1] : Tensor()};
    acc = ops::detail::concat_node(std::span<const Tensor>(next.data(), k + 1 < xs.size() ? 3 : 2), a);
  }
  return acc;
}
inline Tensor concat(std::initializer_list<Tensor> xs, int axis) {
  return concat(std::span<const Tensor>(xs.begin(), xs.size()), axis);
}

namespace ops::detail {

/// slice's node: the part as a view of x (strided where the part is not contiguous), or as a
/// contiguous copy when `contiguous`.
inline Tensor slice_node(const Tensor& x, int axis, std::int64_t start, std::int64_t end, bool contiguous) {
  STRATA_CHECK(x.defined(), "slice of an undefined tensor");
  const int a = x.shape().normalize_axis(axis);
  STRATA_CHECK(0 <= start && start <= end && end <= x.dim(a), "slice [", start, ", ", end, ") out of range for axis ",
               axis, " of extent ", x.dim(a), " (shape ", x.shape(), ")");
  Shape shape = x.shape();
  shape[a] = end - start;
  Tensor out = strata::detail::make_view(x, shape, x.strides(), x.impl()->offset() + start * x.strides()[a]);
  if (contiguous) out = out.contiguous();
  if (is_floating(x.dtype()))
    if (auto* n = autograd::record("slice", &ops::detail::slice_backward, out, x)) {
      n->i[0] = a;
      n->i[1] = start;
    }
  return out;
}

}  // namespace ops::detail

/// Elements [start, end) along `axis` (negative axis counts from the end; start and end must
/// lie in [0, extent]). A view when that part is contiguous, else a contiguous copy.
inline Tensor slice(const Tensor& x, int axis, std::int64_t start, std::int64_t end) {
  return ops::detail::slice_node(x, axis, start, end, true);
}

/// `x` cut along `axis` into parts of the given extents (which must add up to the axis).
inline std::vector<Tensor> split(const Tensor& x, std::initializer_list<std::int64_t> sizes, int axis) {
  STRATA_CHECK(x.defined(), "split of an undefined tensor");
  const int a = x.shape().normalize_axis(axis);
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    STRATA_CHECK(s >= 0, "split: negative part size ", s);
    total += s;
  }
  STRATA_CHECK(total == x.dim(a), "split: parts add up to ", total, ", axis ", axis, " of ", x.shape(), " has ",
               x.dim(a));
  std::vector<Tensor> parts;
  parts.reserve(sizes.size());
  std::int64_t at = 0;
  for (std::int64_t s : sizes) {
    parts.push_back(slice(x, a, at, at + s));
    at += s;
  }
  return parts;
}

}  // namespace strata

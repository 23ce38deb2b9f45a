/// \file
/// Tensor: a shallow, reference-counted handle to a TensorImpl (shape, strides, dtype,
/// device, shared storage, autograd metadata). Copying a Tensor copies the handle, never the
/// data; clone() copies the data.
#pragma once

#include <algorithm>   // std::copy_n
#include <cstdint>
#include <cstring>     // std::memcpy
#include <functional>  // std::function (gradient hooks)
#include <memory>      // std::unique_ptr
#include <ostream>
#include <span>
#include <utility>
#include <vector>

#include <strata/support/check.hpp>   // STRATA_CHECK
#include <strata/tensor/device.hpp>   // Device
#include <strata/tensor/dtype.hpp>    // DType
#include <strata/tensor/shape.hpp>    // Shape
#include <strata/tensor/storage.hpp>  // StorageImpl, ObjectPool

namespace strata {

namespace autograd {
class GradientCompletion;  // autograd/backward.hpp
}  // namespace autograd
class RowSource;  // tensor/row_source.hpp

namespace detail {
class TensorImpl;
}

struct RowGrad;

/// An n-dimensional array on a device, with optional gradient tracking.
///
/// @code
/// strata::Tensor w = strata::zeros({3, 4});
/// w.requires_grad_(true);
/// auto y = strata::sum(strata::relu(w * 2.0));
/// strata::backward(y);
/// auto g = w.grad();   // shape [3, 4]
/// @endcode
class Tensor {
 public:
  /// An undefined tensor (no storage); `defined()` is false.
  Tensor() noexcept = default;
  Tensor(const Tensor& o) noexcept;
  Tensor(Tensor&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  Tensor& operator=(const Tensor& o) noexcept;
  Tensor& operator=(Tensor&& o) noexcept;
  ~Tensor();

  /// A new, uninitialised, contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());

  bool defined() const noexcept { return impl_ != nullptr; }
  const Shape& shape() const noexcept;
  const Shape& strides() const noexcept;
  int ndim() const noexcept { return shape().ndim(); }
  /// Extent of axis `i` (negative counts from the end).
  std::int64_t dim(int i) const { return shape().dim(i); }
  std::int64_t numel() const noexcept { return shape().numel(); }
  DType dtype() const noexcept;
  Device device() const noexcept;
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * size_of(dtype()); }
  bool is_contiguous() const noexcept;

  /// Typed pointer to the first element, for host code; throws if T does not match dtype()
  /// or the tensor lives on a device host code cannot read (copy it with to(Device::cpu())).
  template <class T>
  T* data() const {
    STRATA_CHECK(device().kind == DeviceKind::cpu, "data<", name_of(dtype_v<T>), ">() of a ", device(),
                 " tensor: host code cannot read device memory; copy it first with to(strata::Device::cpu())");
    return device_data<T>();
  }
  /// Typed pointer to the first element on whatever device the tensor lives (for kernels
  /// that run there); throws if T does not match dtype().
  template <class T>
  T* device_data() const {
    STRATA_CHECK(defined(), "data() of an undefined tensor");
    STRATA_CHECK(dtype_v<T> == dtype(), "data<", name_of(dtype_v<T>), ">() of a ", name_of(dtype()), " tensor");
    void* p = raw_data();
    STRATA_CHECK(p != nullptr || nbytes() == 0, "data() of a ", shape(), " tensor whose memory is given back: a "
                 "parameter of a wrap unit of ShardedStrategy<C, ShardStage::parameters> read outside the unit's "
                 "call. Call each unit as module(x) (its forward() runs no hook), keep its parameters out of "
                 "other modules' calls and of the loss, and read them between steps inside "
                 "strata::gather_parameters(strategy, params); or, under ShardedStrategy's stages 2 and 3, a "
                 "parameter's gradient read directly between steps: read it through the Gradients that grad() "
                 "returns (grads[i] gathers it whole)");
    return static_cast<T*>(p);
  }
  /// Untyped pointer to the first element, on the tensor's device.
  void* raw_data() const noexcept;

  /// The single element of a one-element tensor, converted to double.
  double item() const;
  /// A copy of the elements, in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  /// A contiguous copy (or this tensor, if already contiguous).
  Tensor contiguous() const;
  /// A deep copy that does not track gradients.
  Tensor clone() const;
  /// A contiguous copy on `device` (or this tensor, if it is already there); no gradient flows
  /// through the copy.
  Tensor to(Device device) const;
  /// The same data, cut off from the graph.
  Tensor detach() const;
  /// Writes `value` into every element (no gradient tracking).
  Tensor& fill_(double value);
  /// Copies `src`'s elements (same shape and dtype) into this tensor's storage.
  Tensor& copy_(const Tensor& src);

  // ---------------------------------------------------------------- autograd
  bool requires_grad() const noexcept;
  /// Marks a leaf tensor as a variable whose gradient backward() computes.
  Tensor& requires_grad_(bool on = true);
  /// The gradient written by the last backward() (undefined before), dense. A row-sparse
  /// gradient (an embedding's with TableGradient::row_sparse) is scattered into a dense one
  /// here, and stays dense: read it with row_grad() first to keep it in rows.
  Tensor grad() const;
  /// Whether the last backward() left this leaf's gradient in rows (row_grad()).
  bool has_row_grad() const noexcept;
  /// The row-sparse gradient: the row numbers (int64 [k], ascending, distinct) and their rows
  /// ([k, ...]); both undefined when the gradient is dense or absent.
  RowGrad row_grad() const noexcept;
  /// Calls `hook(grad)` once per backward, as soon as this leaf's gradient is final.
  void register_hook(std::function<void(const Tensor&)> hook);
  /// True if no recorded operation produced this tensor.
  bool is_leaf() const noexcept;

  detail::TensorImpl* impl() const noexcept { return impl_; }
  explicit Tensor(detail::TensorImpl* adopt) noexcept : impl_(adopt) {}

  friend bool same_tensor(const Tensor& a, const Tensor& b) noexcept { return a.impl_ == b.impl_; }

 private:
  detail::TensorImpl* impl_ = nullptr;
};

/// A gradient given as some rows of a [V, ...] tensor (docs/design/sparse_tables.md): row indices[j]
/// of the gradient is rows[j], every other row is zero.
struct RowGrad {
  Tensor indices;  ///< int64 [k], ascending, distinct
  Tensor rows;     ///< [k, ...]: the tensor's shape with k rows
  bool defined() const noexcept { return indices.defined(); }
  std::int64_t size() const noexcept { return indices.defined() ? indices.numel() : 0; }
};

namespace detail {

/// Everything a Tensor handle points to. Pooled; reference-counted by Tensor.
class TensorImpl {
 public:
  TensorImpl(StorageImpl* storage, const Shape& shape, const Shape& strides, std::int64_t offset, DType dtype)
      : storage_(storage), shape_(shape), strides_(strides), offset_(offset), dtype_(dtype) {}
  ~TensorImpl() {
    if (storage_) storage_->release();
  }

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) ObjectPool<TensorImpl>::instance().destroy(this);
  }

  StorageImpl* storage() const noexcept { return storage_; }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  std::int64_t offset() const noexcept { return offset_; }
  DType dtype() const noexcept { return dtype_; }
  /// Null while the storage's memory is given back (StorageImpl::give_memory_back).
  void* data() const noexcept {
    char* base = static_cast<char*>(storage_->data());
    return base ? base + offset_ * static_cast<std::int64_t>(size_of(dtype_)) : nullptr;
  }

  /// Makes this header view `src`'s elements (same shape and dtype): afterwards both name
  /// one set of values, while each keeps its own autograd state (a gradient per header).
  void share_storage_of(const TensorImpl& src) {
    STRATA_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "share_storage_of: shape ", src.shape_, " ",
                 name_of(src.dtype_), " vs ", shape_, " ", name_of(dtype_));
    src.storage_->retain();
    if (storage_) storage_->release();
    storage_ = src.storage_;
    strides_ = src.strides_;
    offset_ = src.offset_;
  }

  // Autograd metadata; owned by the autograd layer (see autograd/tape.hpp).
  struct Autograd {
    bool requires_grad = false;
    std::int32_t node = -1;           ///< index of the producing node on its tape
    std::uint64_t node_epoch = 0;     ///< the tape epoch that node belongs to
    std::int32_t first_use = -1;      ///< first node (in recording order) that reads this leaf
    std::uint64_t first_use_epoch = 0;
    Tensor grad;
    std::uint64_t grad_epoch = 0;     ///< backward pass that last wrote `grad` (or the rows)
    /// A row-sparse gradient: while grad_index is defined, it and grad_rows are the gradient
    /// of pass grad_epoch, and `grad` only a buffer kept for reuse (docs/design/sparse_tables.md).
    Tensor grad_index, grad_rows;
    /// Set by this leaf's first row-sparse lookup: its gradients mean rows, in whatever form
    /// they reach an optimizer (the lazy sparse update).
    bool row_sparse = false;
    std::unique_ptr<std::vector<std::function<void(const Tensor&)>>> hooks;
    /// Completes the gradients of the parameter list this leaf heads, where a strategy keeps
    /// them in parts (autograd::set_gradient_completion); null otherwise.
    autograd::GradientCompletion* completion = nullptr;
    /// Where embedding() reads this table's rows while its values live elsewhere (a
    /// parameter server's remote table, inside an epoch); null: in its own memory.
    RowSource* row_source = nullptr;
  } ag;

 private:
  std::atomic<int> refs_{1};
  StorageImpl* storage_;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_;
  DType dtype_;
};

/// A new tensor header over `storage` (whose reference the caller passes on).
inline Tensor make_tensor(StorageImpl* storage, const Shape& shape, const Shape& strides, std::int64_t offset,
                          DType dtype) {
  return Tensor(ObjectPool<TensorImpl>::instance().make(storage, shape, strides, offset, dtype));
}

/// A contiguous host tensor over `data`, memory that `keepalive` owns and keeps alive while
/// the tensor or a view of it exists.
inline Tensor tensor_over(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keepalive) {
  const auto bytes = static_cast<std::size_t>(shape.numel()) * size_of(dtype);
  auto* st = ObjectPool<StorageImpl>::instance().make(data, bytes, std::move(keepalive));
  return make_tensor(st, shape, contiguous_strides(shape), 0, dtype);
}

/// A view of `t`'s storage with another shape (the caller guarantees it fits).
inline Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, std::int64_t offset) {
  t.impl()->storage()->retain();
  return make_tensor(t.impl()->storage(), shape, strides, offset, t.dtype());
}

}  // namespace detail

inline Tensor::Tensor(const Tensor& o) noexcept : impl_(o.impl_) {
  if (impl_) impl_->retain();
}
inline Tensor& Tensor::operator=(const Tensor& o) noexcept {
  if (o.impl_) o.impl_->retain();
  if (impl_) impl_->release();
  impl_ = o.impl_;
  return *this;
}
inline Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    if (impl_) impl_->release();
    impl_ = std::exchange(o.impl_, nullptr);
  }
  return *this;
}
inline Tensor::~Tensor() {
  if (impl_) impl_->release();
}

inline Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const auto bytes = static_cast<std::size_t>(shape.numel()) * size_of(dtype);
  auto* st = detail::ObjectPool<detail::StorageImpl>::instance().make(bytes, device);
  return detail::make_tensor(st, shape, contiguous_strides(shape), 0, dtype);
}

inline const Shape& Tensor::shape() const noexcept {
  static const Shape kEmpty;
  return impl_ ? impl_->shape() : kEmpty;
}
inline const Shape& Tensor::strides() const noexcept {
  static const Shape kEmpty;
  return impl_ ? impl_->strides() : kEmpty;
}
inline DType Tensor::dtype() const noexcept { return impl_ ? impl_->dtype() : DType::f32; }
inline Device Tensor::device() const noexcept { return impl_ ? impl_->storage()->device() : Device::cpu(); }
inline void* Tensor::raw_data() const noexcept { return impl_ ? impl_->data() : nullptr; }

inline bool Tensor::is_contiguous() const noexcept {
  if (!impl_) return true;
  std::int64_t acc = 1;
  const Shape& s = shape();
  const Shape& st = strides();
  for (int i = s.ndim() - 1; i >= 0; --i) {
    if (s[i] != 1 && st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

namespace detail {

/// Calls f(T{}) with T the C++ type of `t`; numeric dtypes only.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u8: return f(std::uint8_t{});
    default: break;
  }
  STRATA_THROW(::strata::invalid_argument, "strata.dtype", "no arithmetic on ", name_of(t), " tensors");
}

/// Calls f(T{}) for float32/float64 and rejects every other dtype, naming `op`.
template <class F>
decltype(auto) visit_floating(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  STRATA_THROW(::strata::invalid_argument, "strata.dtype", op, " needs a float32 or float64 tensor, got ", name_of(t));
}

/// Visits every element of a possibly strided tensor in row-major order: f(linear_index, offset).
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, F&& f) {
  const int nd = shape.ndim();
  const std::int64_t n = shape.numel();
  if (n == 0) return;
  std::array<std::int64_t, kMaxDims> idx{};
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      const auto ud = static_cast<std::size_t>(d);
      if (++idx[ud] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[ud] = 0;
    }
  }
}

}  // namespace detail

inline Tensor Tensor::contiguous() const {
  STRATA_CHECK(defined(), "contiguous() of an undefined tensor");
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype(), device());
  if (device().kind != DeviceKind::cpu) {
    backend_of(device()).gather_strided(device().index, out.raw_data(), raw_data(), dtype(), shape(), strides());
    return out;
  }
  detail::visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    detail::for_each_offset(shape(), strides(), [&](std::int64_t i, std::int64_t off) { dst[i] = src[off]; });
  });
  return out;
}

inline Tensor Tensor::clone() const {
  STRATA_CHECK(defined(), "clone() of an undefined tensor");
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), device());
  if (nbytes() == 0) return out;
  if (device().kind == DeviceKind::cpu)
    std::memcpy(out.raw_data(), src.raw_data(), nbytes());
  else
    backend_of(device()).copy(out.raw_data(), device(), src.raw_data(), device(), nbytes());
  return out;
}

inline Tensor Tensor::to(Device device) const {
  STRATA_CHECK(defined(), "to() of an undefined tensor");
  if (device == this->device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), device);
  if (nbytes() != 0) {
    const Device on = device.kind != DeviceKind::cpu ? device : this->device();
    backend_of(on).copy(out.raw_data(), device, src.raw_data(), this->device(), nbytes());
  }
  return out;
}

inline Tensor Tensor::detach() const {
  STRATA_CHECK(defined(), "detach() of an undefined tensor");
  return detail::make_view(*this, shape(), strides(), impl_->offset());
}

inline Tensor& Tensor::fill_(double value) {
  STRATA_CHECK(defined(), "fill_() of an undefined tensor");
  if (device().kind != DeviceKind::cpu) {
    STRATA_CHECK(is_contiguous(), "fill_() of a non-contiguous ", device(), " view: fill a contiguous tensor and copy_() it");
    backend_of(device()).fill(device().index, raw_data(), dtype(), numel(), value);
    return *this;
  }
  detail::visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(raw_data());
    const T v = static_cast<T>(value);
    if (is_contiguous()) {
      for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
    } else {
      detail::for_each_offset(shape(), strides(), [&](std::int64_t, std::int64_t off) { p[off] = v; });
    }
  });
  return *this;
}

inline Tensor& Tensor::copy_(const Tensor& src) {
  STRATA_CHECK(defined() && src.defined(), "copy_() with an undefined tensor");
  STRATA_CHECK(shape() == src.shape(), "copy_() from shape ", src.shape(), " into shape ", shape());
  STRATA_CHECK(dtype() == src.dtype(), "copy_() from ", src.dtype(), " into ", dtype());
  if (same_tensor(*this, src)) return *this;
  if (device().kind != DeviceKind::cpu || src.device().kind != DeviceKind::cpu) {
    const Device on = device().kind != DeviceKind::cpu ? device() : src.device();
    Tensor s = src.contiguous();
    if (is_contiguous()) {
      if (nbytes() != 0) backend_of(on).copy(raw_data(), device(), s.raw_data(), src.device(), nbytes());
      return *this;
    }
    STRATA_CHECK(device().kind == DeviceKind::cpu, "copy_() into a non-contiguous ", device(),
                 " view: copy into a contiguous tensor");
    return copy_(s.to(Device::cpu()));
  }
  if (is_contiguous() && src.is_contiguous()) {
    if (nbytes() != 0) std::memmove(raw_data(), src.raw_data(), nbytes());
    return *this;
  }
  Tensor s = src.contiguous();
  detail::visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* from = static_cast<const T*>(s.raw_data());
    T* to = static_cast<T*>(raw_data());
    detail::for_each_offset(shape(), strides(), [&](std::int64_t i, std::int64_t off) { to[off] = from[i]; });
  });
  return *this;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  STRATA_CHECK(defined(), "to_vector() of an undefined tensor");
  std::vector<T> out(static_cast<std::size_t>(numel()));
  Tensor c = to(Device::cpu()).contiguous();  // to() keeps a host view's strides
  detail::visit_dtype(dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(c.raw_data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  });
  return out;
}

inline double Tensor::item() const {
  STRATA_CHECK(defined() && numel() == 1, "item() needs a one-element tensor, got shape ", shape());
  const Tensor host = to(Device::cpu());
  return detail::visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(*static_cast<const T*>(host.raw_data()));
  });
}

inline bool Tensor::requires_grad() const noexcept { return impl_ && impl_->ag.requires_grad; }
inline Tensor& Tensor::requires_grad_(bool on) {
  STRATA_CHECK(defined(), "requires_grad_() of an undefined tensor");
  STRATA_CHECK(!on || is_floating(dtype()), "only float32/float64 tensors can require gradients, not ", dtype());
  STRATA_CHECK(is_leaf(), "requires_grad_() on a tensor produced by a recorded operation; call detach() first");
  impl_->ag.requires_grad = on;
  return *this;
}
inline Tensor Tensor::grad() const {
  if (!impl_) return Tensor();
  auto& ag = impl_->ag;
  if (!ag.grad_index.defined()) return ag.grad;
  // Rows to dense: into the buffer the gradient had, where it fits (a strategy's bucket slot).
  Tensor& g = ag.grad;
  if (!g.defined() || !(g.shape() == shape()) || g.dtype() != dtype() || g.device() != device() || !g.is_contiguous())
    g = Tensor::empty(shape(), dtype(), device());
  g.fill_(0.0);
  const std::int64_t width = shape().ndim() > 0 && shape()[0] > 0 ? numel() / shape()[0] : 0;
  const std::int64_t* index = ag.grad_index.data<std::int64_t>();
  detail::visit_floating(dtype(), "row gradient", [&](auto tag) {
    using T = decltype(tag);
    T* d = g.template data<T>();
    const T* r = ag.grad_rows.template data<T>();
    for (std::int64_t j = 0, k = ag.grad_index.numel(); j < k; ++j)
      std::copy_n(r + j * width, width, d + index[j] * width);
  });
  ag.grad_index = Tensor();
  ag.grad_rows = Tensor();
  return g;
}
inline bool Tensor::has_row_grad() const noexcept { return impl_ && impl_->ag.grad_index.defined(); }
inline RowGrad Tensor::row_grad() const noexcept {
  if (!has_row_grad()) return {};
  return {impl_->ag.grad_index, impl_->ag.grad_rows};
}
inline bool Tensor::is_leaf() const noexcept { return !impl_ || impl_->ag.node < 0; }
inline void Tensor::register_hook(std::function<void(const Tensor&)> hook) {
  STRATA_CHECK(defined() && is_leaf() && requires_grad(), "hooks attach to leaf tensors that require gradients");
  if (!impl_->ag.hooks) impl_->ag.hooks = std::make_unique<std::vector<std::function<void(const Tensor&)>>>();
  impl_->ag.hooks->push_back(std::move(hook));
}

inline std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(" << t.dtype() << ", shape=" << t.shape() << ", [";
  auto v = t.to_vector<double>();
  for (std::size_t i = 0; i < v.size() && i < 16; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > 16) os << ", ...";
  return os << "])";
}

}  // namespace strata

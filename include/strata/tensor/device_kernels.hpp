/// \file
/// DeviceKernels: the compute kernels the ops reach a device through, type-erased by dtype
/// (the CUDA side, include/strata/tensor/cuda/backend.cuh, instantiates them for float32 and
/// float64). Pointers are device memory of `device`; every call is queued on the device's
/// stream and returns without waiting. A null entry is a kernel this build lacks (cuDNN's
/// convolutions without -Dcudnn); device_kernels() and the ops name it.
#pragma once

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include <strata/kernels/cpu/conv.hpp>         // ConvGeometry
#include <strata/kernels/cpu/optim_step.hpp>   // SgdParams, AdamParams
#include <strata/kernels/math/binary.hpp>      // BinaryKind
#include <strata/kernels/math/pool.hpp>        // PoolGeometry
#include <strata/tensor/device_backend.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

struct DeviceKernels {
  /// C (+)= op(A) op(B), row-major with row strides.
  void (*gemm)(int device, DType, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
               std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc, bool accumulate);
  /// dst = act(src + bias) over rows x cols (bias: cols values or null; src may be dst).
  void (*bias_act)(int device, DType, std::int64_t rows, std::int64_t cols, const void* src, const void* bias, bool relu,
                   void* dst);
  /// NCHW: dst = act(src + bias[channel]) (bias may be null; src may be dst).
  void (*channel_bias_act)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                           const void* src, const void* bias, bool relu, void* dst);
  /// NCHW: out[c] (+)= the sum over images and plane of x[., c, .].
  void (*channel_sums)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                       const void* x, void* out, bool accumulate);
  /// out[c] (+)= sum over rows of x[r, c].
  void (*column_sums)(int device, DType, std::int64_t rows, std::int64_t cols, const void* x, void* out, bool accumulate);
  /// y = f(x) (kernels/math/unary.hpp's kinds).
  void (*unary)(int device, DType, std::int64_t kind, std::int64_t n, const void* x, double scalar, void* y);
  /// d (+)= g * f'(x), y = f(x).
  void (*unary_backward)(int device, DType, std::int64_t kind, std::int64_t n, const void* g, const void* x,
                         const void* y, double scalar, void* d, bool accumulate);
  /// out = a (kind) b, operands of one shape, contiguous.
  void (*binary)(int device, DType, kernels::math::BinaryKind, std::int64_t n, const void* a, const void* b, void* out);
  /// out (contiguous, `shape`) = a (kind) b read through broadcast strides.
  void (*binary_broadcast)(int device, DType, kernels::math::BinaryKind, const Shape& shape, const Shape& a_strides,
                           const Shape& b_strides, const void* a, const void* b, void* out);
  /// d (+)= the gradient of a (kind) b with respect to operand `which` (0: a, 1: b), one shape.
  void (*binary_backward)(int device, DType, kernels::math::BinaryKind, int which, std::int64_t n, const void* g,
                          const void* a, const void* b, void* d, bool accumulate);
  /// *out (+)= scale * sum(x[0, n)).
  void (*sum)(int device, DType, std::int64_t n, const void* x, void* out, double scale, bool accumulate);
  /// d[0, n) (+)= scale * g[0]: a scalar's gradient spread over the elements it summed.
  void (*spread_scalar)(int device, DType, std::int64_t n, const void* g, double scale, void* d, bool accumulate);
  /// prob = softmax(x) per row; *loss = scale * sum of the rows' cross-entropies (labels of
  /// `label_dtype`, int32 or int64; -1 marks a padding row).
  void (*softmax_xent_forward)(int device, DType, DType label_dtype, std::int64_t rows, std::int64_t cols, const void* x,
                               const void* labels, void* prob, void* loss, double scale);
  void (*softmax_xent_backward)(int device, DType, DType label_dtype, std::int64_t rows, std::int64_t cols,
                                const void* prob, const void* labels, double scale, void* dx, bool accumulate);
  void (*sgd_step)(int device, DType, std::int64_t n, void* p, const void* g, void* buf, const kernels::cpu::SgdParams&);
  void (*adam_step)(int device, DType, std::int64_t n, void* p, const void* g, void* m, void* v,
                    const kernels::cpu::AdamParams&);
  void (*max_pool_forward)(int device, DType, const kernels::math::PoolGeometry&, const void* x, void* y,
                           std::int32_t* argmax);
  void (*max_pool_backward)(int device, DType, const kernels::math::PoolGeometry&, const void* dy,
                            const std::int32_t* argmax, void* dx, bool accumulate);
  /// 2-D average pooling (padding counted as zeros in the k * k divisor).
  void (*avg_pool_forward)(int device, DType, const kernels::math::PoolGeometry&, const void* x, void* y);
  void (*avg_pool_backward)(int device, DType, const kernels::math::PoolGeometry&, const void* dy, void* dx,
                            bool accumulate);
  /// y = softmax(scale * x) per row over what a causal mask of `period` keeps (0: everything;
  /// kernels/cpu/softmax.hpp's causal_visible); dx (+)= scale * y * (dy - sum(dy * y)).
  void (*softmax_forward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* x, void* y,
                          double scale, std::int64_t period);
  void (*softmax_backward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* y, const void* dy,
                           double scale, void* dx, bool accumulate);
  /// y = log_softmax(x) per row; dx (+)= dy - exp(y) * sum(dy).
  void (*log_softmax_forward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* x, void* y);
  void (*log_softmax_backward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* y, const void* dy,
                               void* dx, bool accumulate);
  /// Layer norm over rows of `cols` (w, b: cols values or null); stats[2r], stats[2r + 1] =
  /// the row's mean and 1/sqrt(var + eps). Backward: dx, dw, db may each be null.
  void (*layer_norm_forward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* x, const void* w,
                             const void* b, double eps, void* y, void* stats);
  void (*layer_norm_backward)(int device, DType, std::int64_t rows, std::int64_t cols, const void* x, const void* w,
                              const void* stats, const void* dy, void* dx, bool accumulate_dx, void* dw,
                              bool accumulate_dw, void* db, bool accumulate_db);
  /// dst (+)= src over `shape`, each read or written through its own element strides.
  void (*copy_strided)(int device, DType, const Shape& shape, const void* src, const Shape& src_strides, void* dst,
                       const Shape& dst_strides, bool accumulate);
  /// out[r, :] = table[idx[r], :] for n indices of `index_dtype` (int32 or int64), in range.
  void (*gather_rows)(int device, DType, DType index_dtype, std::int64_t n, std::int64_t cols, const void* table,
                      const void* idx, void* out);
  /// d[rows[s], :] += the rows of g at positions order[starts[s]] .. order[starts[s + 1] - 1],
  /// in that order; plan = [rows (segments) | starts (segments + 1) | order], int64, on the device.
  void (*sum_rows)(int device, DType, std::int64_t segments, std::int64_t cols, const std::int64_t* plan,
                   const void* g, void* d);
  /// Batch norm over [images, channels, plane]: sums = [Σ x | Σ x²] per channel (2C doubles of
  /// device memory); the output pass act((x - mean) rstd w + b + r); the gradient's sums
  /// [Σ dy | Σ dy h] (dy masked in place by the fused ReLU's output when given); the input's
  /// gradient (mean_dy, mean_dy_h null: evaluation mode).
  void (*channel_moments)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                          const void* x, double* sums);
  void (*batch_norm_apply)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                           const void* x, const void* mean, const void* rstd, const void* w, const void* b,
                           const void* residual, bool relu, void* y);
  void (*batch_norm_grad_sums)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                               const void* x, const void* mean, const void* rstd, void* dy, const void* relu_out,
                               double* sums);
  void (*batch_norm_input_grad)(int device, DType, std::int64_t images, std::int64_t channels, std::int64_t plane,
                                const void* x, const void* mean, const void* rstd, const void* w, const void* dy,
                                const void* mean_dy, const void* mean_dy_h, void* dx, bool accumulate);
  /// Convolutions (null without cuDNN): y = conv(x, w); dx (+)=; dw (+)=.
  void (*conv_forward)(int device, DType, const kernels::cpu::ConvGeometry&, std::int64_t out_channels, const void* x,
                       const void* w, void* y);
  void (*conv_backward_data)(int device, DType, const kernels::cpu::ConvGeometry&, std::int64_t out_channels,
                             const void* w, const void* dy, void* dx, bool accumulate);
  void (*conv_backward_filter)(int device, DType, const kernels::cpu::ConvGeometry&, std::int64_t out_channels,
                               const void* x, const void* dy, void* dw, bool accumulate);
  /// `batch` products C_i (+)= op(A_i) op(B_i) in one call, operand i `stride_*` elements after
  /// operand i - 1 (a stride of 0 repeats the operand; C's is never 0). Null: a gemm per product.
  void (*gemm_batched)(int device, DType, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                       const void* a, std::int64_t lda, std::int64_t stride_a, const void* b, std::int64_t ldb,
                       std::int64_t stride_b, void* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch,
                       bool accumulate);
};

namespace detail {
inline std::atomic<const DeviceKernels*> cuda_kernels_slot{nullptr};
}

/// Installs the CUDA kernels (backend.cuh does this with the backend).
inline void register_cuda_kernels(const DeviceKernels* k) noexcept {
  detail::cuda_kernels_slot.store(k, std::memory_order_release);
}

/// True if `t` lives on a device other than the host.
inline bool on_device(const Tensor& t) noexcept { return t.device().kind != DeviceKind::cpu; }

/// The kernels of `op`'s operands' device. Every defined operand must be on that device.
template <class... Ts>
const DeviceKernels& device_kernels(const char* op, const Tensor& first, const Ts&... rest) {
  const Device d = first.device();
  [[maybe_unused]] const auto same = [&](const Tensor& t) {  // unused when `rest` is empty
    STRATA_CHECK(!t.defined() || t.device() == d, op, ": operands on different devices (", d, " and ", t.device(),
                 "); move them with to()");
  };
  (same(rest), ...);
  (void)backend_of(d);  // a clear error when the program has no CUDA kernels or no such device
  return *detail::cuda_kernels_slot.load(std::memory_order_acquire);
}

/// Throws, naming `op`, for a case its device path lacks.
[[noreturn]] inline void unsupported_on_device(const char* op, const Device& d, const char* what) {
  STRATA_THROW(invalid_argument, "strata.device", op, " on ", (std::ostringstream() << d).str(), ": ", what);
}

/// Throws unless every operand is on the host (for ops with no device path).
template <class... Ts>
void require_host(const char* op, const Ts&... ts) {
  const auto check = [&](const Tensor& t) {
    if (t.defined() && on_device(t)) unsupported_on_device(op, t.device(), "this operation runs on the CPU only; "
                                                                           "copy its operands with to(Device::cpu())");
  };
  (check(ts), ...);
}

}  // namespace strata

/// \file
/// The CUDA DeviceKernels table: each entry switches on the dtype and launches a kernel of
/// kernels/strata/kernels/cuda on the device's compute stream. backend.cuh registers it.
#pragma once

#include <strata/kernels/cuda/allocator.hpp>
#include <strata/kernels/cuda/batch_norm.cuh>
#include <strata/kernels/cuda/blas.hpp>
#include <strata/kernels/cuda/elementwise.cuh>
#include <strata/kernels/cuda/gather.cuh>
#include <strata/kernels/cuda/optim_step.cuh>
#include <strata/kernels/cuda/pool.cuh>
#include <strata/kernels/cuda/reduce.cuh>
#include <strata/kernels/cuda/rows.cuh>
#include <strata/kernels/cuda/softmax.cuh>
#if STRATA_HAS_CUDNN
#include <strata/kernels/cuda/conv_cudnn.hpp>
#endif
#include <strata/tensor/device_kernels.hpp>

namespace strata::kernels::cuda::table {

/// Calls f(T{}) for float32/float64 with `device` current; other dtypes are an error naming `op`.
template <class F>
void floating(int device, DType t, const char* op, F&& f) {
  DeviceGuard on(device);
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  STRATA_THROW(invalid_argument, "strata.dtype", op, " on a CUDA device needs float32 or float64, got ", name_of(t));
}

inline cudaStream_t stream(int device) { return compute_stream(device); }

inline void gemm(int device, DType dt, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
                 std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc, bool accumulate) {
  floating(device, dt, "matmul", [&](auto tag) {
    using T = decltype(tag);
    cuda::gemm<T>(device, math::GemmArgs<T>{ta, tb, m, n, k, T(1), static_cast<const T*>(a), lda,
                                           static_cast<const T*>(b), ldb, accumulate ? T(1) : T(0), static_cast<T*>(c),
                                           ldc});
  });
}

inline void gemm_batched(int device, DType dt, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                         const void* a, std::int64_t lda, std::int64_t stride_a, const void* b, std::int64_t ldb,
                         std::int64_t stride_b, void* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch,
                         bool accumulate) {
  floating(device, dt, "matmul", [&](auto tag) {
    using T = decltype(tag);
    cuda::gemm_strided_batched<T>(device,
                                  math::GemmArgs<T>{ta, tb, m, n, k, T(1), static_cast<const T*>(a), lda,
                                                    static_cast<const T*>(b), ldb, accumulate ? T(1) : T(0),
                                                    static_cast<T*>(c), ldc},
                                  stride_a, stride_b, stride_c, batch);
  });
}

inline void bias_act(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* src, const void* bias,
                     bool relu, void* dst) {
  floating(device, dt, "bias_act", [&](auto tag) {
    using T = decltype(tag);
    cuda::bias_act_rows<T>(rows, cols, static_cast<const T*>(src), static_cast<const T*>(bias), relu,
                           static_cast<T*>(dst), stream(device));
  });
}

inline void channel_bias_act(int device, DType dt, std::int64_t images, std::int64_t channels, std::int64_t plane,
                             const void* src, const void* bias, bool relu, void* dst) {
  floating(device, dt, "conv2d bias", [&](auto tag) {
    using T = decltype(tag);
    cuda::channel_bias_act<T>(images, channels, plane, static_cast<const T*>(src), static_cast<const T*>(bias), relu,
                              static_cast<T*>(dst), stream(device));
  });
}

inline void channel_sums(int device, DType dt, std::int64_t images, std::int64_t channels, std::int64_t plane,
                         const void* x, void* out, bool accumulate) {
  floating(device, dt, "conv2d bias backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::channel_sums<T>(images, channels, plane, static_cast<const T*>(x), static_cast<T*>(out), accumulate,
                          stream(device));
  });
}

inline void column_sums(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* x, void* out,
                        bool accumulate) {
  floating(device, dt, "column_sums", [&](auto tag) {
    using T = decltype(tag);
    cuda::sum_columns<T>(rows, cols, static_cast<const T*>(x), static_cast<T*>(out), accumulate, stream(device));
  });
}

inline void unary(int device, DType dt, std::int64_t kind, std::int64_t n, const void* x, double scalar, void* y) {
  floating(device, dt, "unary", [&](auto tag) {
    using T = decltype(tag);
    cuda::unary<T>(kind, n, static_cast<const T*>(x), static_cast<T>(scalar), static_cast<T*>(y), stream(device));
  });
}

inline void unary_backward(int device, DType dt, std::int64_t kind, std::int64_t n, const void* g, const void* x,
                           const void* y, double scalar, void* d, bool accumulate) {
  floating(device, dt, "unary backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::unary_backward<T>(kind, n, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(y),
                            static_cast<T>(scalar), static_cast<T*>(d), accumulate, stream(device));
  });
}

inline void binary(int device, DType dt, math::BinaryKind kind, std::int64_t n, const void* a, const void* b,
                   void* out) {
  floating(device, dt, "binary", [&](auto tag) {
    using T = decltype(tag);
    cuda::binary<T>(kind, n, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), stream(device));
  });
}

inline void binary_broadcast(int device, DType dt, math::BinaryKind kind, const Shape& shape, const Shape& sa,
                             const Shape& sb, const void* a, const void* b, void* out) {
  floating(device, dt, "binary", [&](auto tag) {
    using T = decltype(tag);
    cuda::binary_broadcast<T>(kind, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out),
                              strided_index(shape.dims(), contiguous_strides(shape).dims(), sa.dims(), sb.dims()), shape.numel(), stream(device));
  });
}

inline void binary_backward(int device, DType dt, math::BinaryKind kind, int which, std::int64_t n, const void* g,
                            const void* a, const void* b, void* d, bool accumulate) {
  floating(device, dt, "binary backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::binary_backward<T>(kind, which, n, static_cast<const T*>(g), static_cast<const T*>(a),
                             static_cast<const T*>(b), static_cast<T*>(d), accumulate, stream(device));
  });
}

inline void sum(int device, DType dt, std::int64_t n, const void* x, void* out, double scale, bool accumulate) {
  floating(device, dt, "sum", [&](auto tag) {
    using T = decltype(tag);
    cuda::sum<T>(device, n, static_cast<const T*>(x), static_cast<T*>(out), scale, accumulate, stream(device));
  });
}

inline void spread_scalar(int device, DType dt, std::int64_t n, const void* g, double scale, void* d, bool accumulate) {
  floating(device, dt, "sum backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::spread_scalar<T>(n, static_cast<const T*>(g), static_cast<T>(scale), static_cast<T*>(d), accumulate,
                           stream(device));
  });
}

template <class F>
void label_type(DType t, F&& f) {
  if (t == DType::i32) return f(std::int32_t{});
  if (t == DType::i64) return f(std::int64_t{});
  STRATA_THROW(invalid_argument, "strata.dtype", "labels must be int32 or int64, got ", name_of(t));
}

inline void softmax_xent_forward(int device, DType dt, DType lt, std::int64_t rows, std::int64_t cols, const void* x,
                                 const void* labels, void* prob, void* loss, double scale) {
  floating(device, dt, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    label_type(lt, [&](auto ltag) {
      using L = decltype(ltag);
      auto& alloc = CachingDeviceAllocator::of(device);
      const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(rows);
      void* row_loss = alloc.allocate(bytes);
      cuda::softmax_xent_forward<T, L>(device, rows, cols, static_cast<const T*>(x), static_cast<const L*>(labels),
                                       static_cast<T*>(prob), static_cast<T*>(row_loss), static_cast<T*>(loss), scale,
                                       stream(device));
      alloc.deallocate(row_loss, bytes);  // stream-ordered reuse
    });
  });
}

inline void softmax_xent_backward(int device, DType dt, DType lt, std::int64_t rows, std::int64_t cols,
                                  const void* prob, const void* labels, double scale, void* dx, bool accumulate) {
  floating(device, dt, "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    label_type(lt, [&](auto ltag) {
      using L = decltype(ltag);
      cuda::softmax_xent_backward<T, L>(rows, cols, static_cast<const T*>(prob), static_cast<const L*>(labels),
                                        static_cast<T>(scale), static_cast<T*>(dx), accumulate, stream(device));
    });
  });
}

inline void sgd_step(int device, DType dt, std::int64_t n, void* p, const void* g, void* buf,
                     const math::SgdParams& o) {
  floating(device, dt, "SGD", [&](auto tag) {
    using T = decltype(tag);
    cuda::sgd_step<T>(n, static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(buf), o, stream(device));
  });
}

inline void adam_step(int device, DType dt, std::int64_t n, void* p, const void* g, void* m, void* v,
                      const math::AdamParams& o) {
  floating(device, dt, "Adam", [&](auto tag) {
    using T = decltype(tag);
    cuda::adam_step<T>(n, static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(m), static_cast<T*>(v), o,
                       stream(device));
  });
}

inline void max_pool_forward(int device, DType dt, const math::PoolGeometry& g, const void* x, void* y,
                             std::int32_t* argmax) {
  floating(device, dt, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::max_pool2d_forward<T>(g, static_cast<const T*>(x), static_cast<T*>(y), argmax, stream(device));
  });
}

inline void max_pool_backward(int device, DType dt, const math::PoolGeometry& g, const void* dy,
                              const std::int32_t* argmax, void* dx, bool accumulate) {
  floating(device, dt, "max_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::max_pool2d_backward<T>(g, static_cast<const T*>(dy), argmax, static_cast<T*>(dx), accumulate,
                                 stream(device));
  });
}

inline void avg_pool_forward(int device, DType dt, const math::PoolGeometry& g, const void* x, void* y) {
  floating(device, dt, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::avg_pool2d_forward<T>(g, static_cast<const T*>(x), static_cast<T*>(y), stream(device));
  });
}

inline void avg_pool_backward(int device, DType dt, const math::PoolGeometry& g, const void* dy, void* dx,
                              bool accumulate) {
  floating(device, dt, "avg_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::avg_pool2d_backward<T>(g, static_cast<const T*>(dy), static_cast<T*>(dx), accumulate, stream(device));
  });
}

inline void softmax_forward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* x, void* y,
                            double scale, std::int64_t period) {
  floating(device, dt, "softmax", [&](auto tag) {
    using T = decltype(tag);
    cuda::softmax_forward<T>(rows, cols, static_cast<const T*>(x), static_cast<T*>(y), static_cast<T>(scale), period,
                             stream(device));
  });
}

inline void softmax_backward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* y,
                             const void* dy, double scale, void* dx, bool accumulate) {
  floating(device, dt, "softmax backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::softmax_backward<T>(rows, cols, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T>(scale),
                              static_cast<T*>(dx), accumulate, stream(device));
  });
}

inline void log_softmax_forward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* x, void* y) {
  floating(device, dt, "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    cuda::log_softmax_forward<T>(rows, cols, static_cast<const T*>(x), static_cast<T*>(y), stream(device));
  });
}

inline void log_softmax_backward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* y,
                                 const void* dy, void* dx, bool accumulate) {
  floating(device, dt, "log_softmax backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::log_softmax_backward<T>(rows, cols, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx),
                                  accumulate, stream(device));
  });
}

inline void layer_norm_forward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                               const void* w, const void* b, double eps, void* y, void* stats) {
  floating(device, dt, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    cuda::layer_norm_forward<T>(rows, cols, static_cast<const T*>(x), static_cast<const T*>(w),
                                static_cast<const T*>(b), eps, static_cast<T*>(y), static_cast<T*>(stats),
                                stream(device));
  });
}

inline void layer_norm_backward(int device, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                                const void* w, const void* stats, const void* dy, void* dx, bool accumulate_dx,
                                void* dw, bool accumulate_dw, void* db, bool accumulate_db) {
  floating(device, dt, "layer_norm backward", [&](auto tag) {
    using T = decltype(tag);
    auto& alloc = CachingDeviceAllocator::of(device);
    const std::size_t bytes = dw ? sizeof(T) * static_cast<std::size_t>(rows * cols) : 0;
    void* scratch = bytes ? alloc.allocate(bytes) : nullptr;
    cuda::layer_norm_backward<T>(rows, cols, static_cast<const T*>(x), static_cast<const T*>(w),
                                 static_cast<const T*>(stats), static_cast<const T*>(dy), static_cast<T*>(dx),
                                 accumulate_dx, static_cast<T*>(dw), accumulate_dw, static_cast<T*>(db), accumulate_db,
                                 static_cast<T*>(scratch), stream(device));
    if (scratch) alloc.deallocate(scratch, bytes);  // stream-ordered reuse
  });
}

inline void copy_strided(int device, DType dt, const Shape& shape, const void* src, const Shape& src_strides,
                         void* dst, const Shape& dst_strides, bool accumulate) {
  floating(device, dt, "strided copy", [&](auto tag) {
    using T = decltype(tag);
    cuda::copy_strided<T>(shape.dims(), static_cast<const T*>(src), src_strides.dims(), static_cast<T*>(dst),
                          dst_strides.dims(), accumulate, stream(device));
  });
}

inline void gather_rows(int device, DType dt, DType it, std::int64_t n, std::int64_t cols, const void* table,
                        const void* idx, void* out) {
  floating(device, dt, "embedding", [&](auto tag) {
    using T = decltype(tag);
    label_type(it, [&](auto itag) {
      using I = decltype(itag);
      cuda::gather_rows<T, I>(n, cols, static_cast<const T*>(table), static_cast<const I*>(idx), static_cast<T*>(out),
                              stream(device));
    });
  });
}

inline void sum_rows(int device, DType dt, std::int64_t segments, std::int64_t cols, const std::int64_t* plan,
                     const void* g, void* d) {
  floating(device, dt, "embedding backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::sum_rows<T>(segments, cols, plan, static_cast<const T*>(g), static_cast<T*>(d), stream(device));
  });
}

inline void channel_moments(int device, DType dt, std::int64_t images, std::int64_t channels, std::int64_t plane,
                            const void* x, double* sums) {
  floating(device, dt, "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    cuda::channel_moments<T>(images, channels, plane, static_cast<const T*>(x), sums, stream(device));
  });
}

inline void batch_norm_apply(int device, DType dt, std::int64_t images, std::int64_t channels, std::int64_t plane,
                             const void* x, const void* mean, const void* rstd, const void* w, const void* b,
                             const void* residual, bool relu, void* y) {
  floating(device, dt, "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    cuda::batch_norm_apply<T>(images, channels, plane, static_cast<const T*>(x), static_cast<const T*>(mean),
                              static_cast<const T*>(rstd), static_cast<const T*>(w), static_cast<const T*>(b),
                              static_cast<const T*>(residual), relu, static_cast<T*>(y), stream(device));
  });
}

inline void batch_norm_grad_sums(int device, DType dt, std::int64_t images, std::int64_t channels, std::int64_t plane,
                                 const void* x, const void* mean, const void* rstd, void* dy, const void* relu_out,
                                 double* sums) {
  floating(device, dt, "batch_norm backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::batch_norm_grad_sums<T>(images, channels, plane, static_cast<const T*>(x), static_cast<const T*>(mean),
                                  static_cast<const T*>(rstd), static_cast<T*>(dy), static_cast<const T*>(relu_out),
                                  sums, stream(device));
  });
}

inline void batch_norm_input_grad(int device, DType dt, std::int64_t images, std::int64_t channels,
                                  std::int64_t plane, const void* x, const void* mean, const void* rstd, const void* w,
                                  const void* dy, const void* mean_dy, const void* mean_dy_h, void* dx,
                                  bool accumulate) {
  floating(device, dt, "batch_norm backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::batch_norm_input_grad<T>(images, channels, plane, static_cast<const T*>(x), static_cast<const T*>(mean),
                                   static_cast<const T*>(rstd), static_cast<const T*>(w), static_cast<const T*>(dy),
                                   static_cast<const T*>(mean_dy), static_cast<const T*>(mean_dy_h),
                                   static_cast<T*>(dx), accumulate, stream(device));
  });
}

#if STRATA_HAS_CUDNN
inline void conv_forward(int device, DType dt, const math::ConvGeometry& g, std::int64_t oc, const void* x, const void* w,
                         void* y) {
  floating(device, dt, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::conv2d_forward<T>(device, g, oc, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y));
  });
}
inline void conv_backward_data(int device, DType dt, const math::ConvGeometry& g, std::int64_t oc, const void* w,
                               const void* dy, void* dx, bool accumulate) {
  floating(device, dt, "conv2d backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::conv2d_backward_data<T>(device, g, oc, static_cast<const T*>(w), static_cast<const T*>(dy),
                                  static_cast<T*>(dx), accumulate);
  });
}
inline void conv_backward_filter(int device, DType dt, const math::ConvGeometry& g, std::int64_t oc, const void* x,
                                 const void* dy, void* dw, bool accumulate) {
  floating(device, dt, "conv2d backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::conv2d_backward_filter<T>(device, g, oc, static_cast<const T*>(x), static_cast<const T*>(dy),
                                    static_cast<T*>(dw), accumulate);
  });
}
#endif

inline constexpr DeviceKernels kKernels{
    &gemm,          &bias_act,
    &channel_bias_act, &channel_sums,
    &column_sums,   &unary,
    &unary_backward, &binary,
    &binary_broadcast, &binary_backward,
    &sum,           &spread_scalar,
    &softmax_xent_forward, &softmax_xent_backward,
    &sgd_step,      &adam_step,
    &max_pool_forward, &max_pool_backward,
    &avg_pool_forward, &avg_pool_backward,
    &softmax_forward, &softmax_backward,
    &log_softmax_forward, &log_softmax_backward,
    &layer_norm_forward, &layer_norm_backward,
    &copy_strided,  &gather_rows,
    &sum_rows,      &channel_moments,
    &batch_norm_apply, &batch_norm_grad_sums,
    &batch_norm_input_grad,
#if STRATA_HAS_CUDNN
    &conv_forward,  &conv_backward_data,
    &conv_backward_filter,
#else
    nullptr,        nullptr,
    nullptr,
#endif
    &gemm_batched,
};

}  // namespace strata::kernels::cuda::table

// A stand-in for CUDA devices in CPU-only test programs: install_host_device() registers a
// DeviceBackend and DeviceKernels for cuda:0 and cuda:1 whose memory is host memory and whose
// kernels are plain loops (two devices: a strategy's replicas on GPUs of their own). A tensor on it is a device tensor to the ops (data<T>() of it throws, as on
// a GPU), so every op must take its device path: a backward pass or an op that reads device
// memory from host code fails here, on the CPU, before a GPU ever runs it. Convolutions stay
// null, as in a build without cuDNN. One program only: it takes the place of backend.cuh.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <strata/kernels/cpu/batch_norm.hpp>
#include <strata/kernels/cpu/layer_norm.hpp>
#include <strata/kernels/cpu/optim_step.hpp>
#include <strata/kernels/cpu/pool.hpp>
#include <strata/kernels/cpu/softmax.hpp>
#include <strata/kernels/math/binary.hpp>
#include <strata/kernels/math/unary.hpp>
#include <strata/ops/detail/strided.hpp>
#include <strata/tensor/device_kernels.hpp>

namespace support::host_device {

using strata::DType;
using strata::Shape;
using strata::kernels::math::BinaryKind;

template <class T>
T* at(void* p) { return static_cast<T*>(p); }
template <class T>
const T* at(const void* p) { return static_cast<const T*>(p); }

template <class F>
void floating(DType t, F&& f) {
  strata::detail::visit_floating(t, "host device kernel", std::forward<F>(f));
}

template <class T>
void put(T& d, T v, bool accumulate) { d = accumulate ? d + v : v; }

/// How many GEMMs and batched GEMMs the stand-in has run, and how many copies it made from a
/// device to the host: a test tells one batched call from a launch per batch entry, and one
/// read of a device's result from a read per tensor, by them.
inline std::atomic<std::int64_t> gemm_calls{0}, gemm_batched_calls{0}, to_host_copies{0};

inline const strata::DeviceBackend backend{
    "host stand-in for cuda",
    []() noexcept { return 2; },
    [](int, std::size_t bytes) -> void* { return ::operator new(std::max<std::size_t>(bytes, 1)); },
    [](int, void* p, std::size_t) noexcept { ::operator delete(p); },
    [](void* dst, strata::Device to, const void* src, strata::Device from, std::size_t bytes) {
      if (to == strata::Device::cpu() && from != strata::Device::cpu()) ++to_host_copies;
      if (bytes != 0) std::memcpy(dst, src, bytes);
    },
    [](int, void* dst, DType t, std::int64_t n, double v) {
      strata::detail::visit_dtype(t, [&](auto tag) {
        using T = decltype(tag);
        std::fill_n(at<T>(dst), n, static_cast<T>(v));
      });
    },
    [](int, void* dst, const void* src, DType t, const Shape& shape, const Shape& strides) {
      const std::size_t es = strata::size_of(t);
      std::int64_t i = 0;
      strata::detail::for_each_strided<1>(shape, {strides}, [&](const auto& o) {
        std::memcpy(static_cast<char*>(dst) + es * static_cast<std::size_t>(i++),
                    static_cast<const char*>(src) + es * static_cast<std::size_t>(o[0]), es);
      });
    },
    [](int) {},
};

inline strata::DeviceKernels make_kernels() {
  strata::DeviceKernels k{};
  k.gemm = [](int, DType t, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t kk, const void* a,
              std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc, bool acc) {
    ++gemm_calls;
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          T s = 0;
          for (std::int64_t p = 0; p < kk; ++p)
            s += at<T>(a)[ta ? p * lda + i : i * lda + p] * at<T>(b)[tb ? j * ldb + p : p * ldb + j];
          put(at<T>(c)[i * ldc + j], s, acc);
        }
    });
  };
  k.gemm_batched = [](int, DType t, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t kk, const void* a,
                      std::int64_t lda, std::int64_t sa, const void* b, std::int64_t ldb, std::int64_t sb, void* c,
                      std::int64_t ldc, std::int64_t sc, std::int64_t batch, bool acc) {
    ++gemm_batched_calls;
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t q = 0; q < batch; ++q)
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            T s = 0;
            for (std::int64_t p = 0; p < kk; ++p)
              s += at<T>(a)[q * sa + (ta ? p * lda + i : i * lda + p)] * at<T>(b)[q * sb + (tb ? j * ldb + p : p * ldb + j)];
            put(at<T>(c)[q * sc + i * ldc + j], s, acc);
          }
    });
  };
  k.bias_act = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* src, const void* bias, bool relu,
                  void* dst) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < rows * cols; ++i) {
        const T v = at<T>(src)[i] + (bias ? at<T>(bias)[i % cols] : T(0));
        at<T>(dst)[i] = relu && v < T(0) ? T(0) : v;
      }
    });
  };
  k.column_sums = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* x, void* out, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t c = 0; c < cols; ++c) {
        T s = 0;
        for (std::int64_t r = 0; r < rows; ++r) s += at<T>(x)[r * cols + c];
        put(at<T>(out)[c], s, acc);
      }
    });
  };
  k.unary = [](int, DType t, std::int64_t kind, std::int64_t n, const void* x, double scalar, void* y) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < n; ++i)
        at<T>(y)[i] = strata::kernels::math::unary_fwd<T>(kind, at<T>(x)[i], static_cast<T>(scalar));
    });
  };
  k.unary_backward = [](int, DType t, std::int64_t kind, std::int64_t n, const void* g, const void* x, const void* y,
                        double scalar, void* d, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < n; ++i)
        put(at<T>(d)[i],
            at<T>(g)[i] * strata::kernels::math::unary_dydx<T>(kind, at<T>(x)[i], at<T>(y)[i], static_cast<T>(scalar)),
            acc);
    });
  };
  k.binary = [](int, DType t, BinaryKind kind, std::int64_t n, const void* a, const void* b, void* out) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < n; ++i) at<T>(out)[i] = strata::kernels::math::binary(kind, at<T>(a)[i], at<T>(b)[i]);
    });
  };
  k.binary_broadcast = [](int, DType t, BinaryKind kind, const Shape& shape, const Shape& as, const Shape& bs,
                          const void* a, const void* b, void* out) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      const std::array<Shape, 3> st{strata::contiguous_strides(shape), as, bs};
      strata::detail::for_each_strided<3>(shape, st, [&](const auto& o) {
        at<T>(out)[o[0]] = strata::kernels::math::binary(kind, at<T>(a)[o[1]], at<T>(b)[o[2]]);
      });
    });
  };
  k.binary_backward = [](int, DType t, BinaryKind kind, int which, std::int64_t n, const void* g, const void* a,
                         const void* b, void* d, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      namespace m = strata::kernels::math;
      for (std::int64_t i = 0; i < n; ++i)
        put(at<T>(d)[i],
            which == 0 ? m::binary_grad_a(kind, at<T>(g)[i], at<T>(b)[i])
                       : m::binary_grad_b(kind, at<T>(g)[i], at<T>(a)[i], at<T>(b)[i]),
            acc);
    });
  };
  k.sum = [](int, DType t, std::int64_t n, const void* x, void* out, double scale, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(at<T>(x)[i]);
      put(*at<T>(out), static_cast<T>(scale * s), acc);
    });
  };
  k.spread_scalar = [](int, DType t, std::int64_t n, const void* g, double scale, void* d, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < n; ++i) put(at<T>(d)[i], static_cast<T>(scale * static_cast<double>(*at<T>(g))), acc);
    });
  };
  k.softmax_xent_forward = [](int, DType t, DType lt, std::int64_t rows, std::int64_t cols, const void* x,
                              const void* labels, void* prob, void* loss, double scale) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      const auto run = [&](auto* l) {
        *at<T>(loss) = static_cast<T>(
            scale * strata::kernels::cpu::softmax_xent_forward<T>(rows, cols, at<T>(x), l, at<T>(prob)));
      };
      if (lt == DType::i32) run(at<std::int32_t>(labels));
      else run(at<std::int64_t>(labels));
    });
  };
  k.softmax_xent_backward = [](int, DType t, DType lt, std::int64_t rows, std::int64_t cols, const void* prob,
                               const void* labels, double scale, void* dx, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      const auto run = [&](auto* l) {
        strata::kernels::cpu::softmax_xent_backward<T>(rows, cols, at<T>(prob), l, static_cast<T>(scale), at<T>(dx),
                                                       acc);
      };
      if (lt == DType::i32) run(at<std::int32_t>(labels));
      else run(at<std::int64_t>(labels));
    });
  };
  k.sgd_step = [](int, DType t, std::int64_t n, void* p, const void* g, void* buf,
                  const strata::kernels::cpu::SgdParams& o) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::sgd_step<T>(n, at<T>(p), at<T>(g), at<T>(buf), o);
    });
  };
  k.adam_step = [](int, DType t, std::int64_t n, void* p, const void* g, void* m, void* v,
                   const strata::kernels::cpu::AdamParams& o) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::adam_step<T>(n, at<T>(p), at<T>(g), at<T>(m), at<T>(v), o);
    });
  };
  k.max_pool_forward = [](int, DType t, const strata::kernels::math::PoolGeometry& geo, const void* x, void* y,
                          std::int32_t* arg) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::max_pool2d_forward<T>(geo, at<T>(x), at<T>(y), arg);
    });
  };
  k.max_pool_backward = [](int, DType t, const strata::kernels::math::PoolGeometry& geo, const void* dy,
                           const std::int32_t* arg, void* dx, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::max_pool2d_backward<T>(geo, at<T>(dy), arg, at<T>(dx), acc);
    });
  };
  k.avg_pool_forward = [](int, DType t, const strata::kernels::math::PoolGeometry& geo, const void* x, void* y) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::avg_pool2d_forward<T>(geo, at<T>(x), at<T>(y));
    });
  };
  k.avg_pool_backward = [](int, DType t, const strata::kernels::math::PoolGeometry& geo, const void* dy, void* dx,
                           bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::avg_pool2d_backward<T>(geo, at<T>(dy), at<T>(dx), acc);
    });
  };
  k.softmax_forward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* x, void* y, double scale,
                         std::int64_t period) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::softmax_forward<T>(rows, cols, at<T>(x), at<T>(y), static_cast<T>(scale), period);
    });
  };
  k.softmax_backward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* y, const void* dy,
                          double scale, void* dx, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::softmax_backward<T>(rows, cols, at<T>(y), at<T>(dy), static_cast<T>(scale), at<T>(dx), acc);
    });
  };
  k.log_softmax_forward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* x, void* y) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::log_softmax_forward<T>(rows, cols, at<T>(x), at<T>(y));
    });
  };
  k.log_softmax_backward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* y, const void* dy,
                              void* dx, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::log_softmax_backward<T>(rows, cols, at<T>(y), at<T>(dy), at<T>(dx), acc);
    });
  };
  k.layer_norm_forward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* x, const void* w,
                            const void* b, double eps, void* y, void* stats) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::layer_norm_forward<T>(rows, cols, at<T>(x), at<T>(w), at<T>(b), eps, at<T>(y),
                                                  at<T>(stats));
    });
  };
  k.layer_norm_backward = [](int, DType t, std::int64_t rows, std::int64_t cols, const void* x, const void* w,
                             const void* stats, const void* dy, void* dx, bool adx, void* dw, bool adw, void* db,
                             bool adb) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::layer_norm_backward<T>(rows, cols, at<T>(x), at<T>(w), at<T>(stats), at<T>(dy), at<T>(dx),
                                                   adx, at<T>(dw), adw, at<T>(db), adb);
    });
  };
  k.copy_strided = [](int, DType t, const Shape& shape, const void* src, const Shape& ss, void* dst, const Shape& ds,
                      bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      const std::array<Shape, 2> st{ss, ds};
      strata::detail::for_each_strided<2>(shape, st, [&](const auto& o) { put(at<T>(dst)[o[1]], at<T>(src)[o[0]], acc); });
    });
  };
  k.gather_rows = [](int, DType t, DType it, std::int64_t n, std::int64_t cols, const void* table, const void* idx,
                     void* out) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t row = it == DType::i32 ? at<std::int32_t>(idx)[r] : at<std::int64_t>(idx)[r];
        std::copy_n(at<T>(table) + row * cols, cols, at<T>(out) + r * cols);
      }
    });
  };
  k.sum_rows = [](int, DType t, std::int64_t segments, std::int64_t cols, const std::int64_t* plan, const void* g,
                  void* d) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t* starts = plan + segments;
      const std::int64_t* order = starts + segments + 1;
      for (std::int64_t s = 0; s < segments; ++s)
        for (std::int64_t j = starts[s]; j < starts[s + 1]; ++j)
          for (std::int64_t c = 0; c < cols; ++c) at<T>(d)[plan[s] * cols + c] += at<T>(g)[order[j] * cols + c];
    });
  };
  k.channel_moments = [](int, DType t, std::int64_t images, std::int64_t channels, std::int64_t plane, const void* x,
                         double* sums) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      std::fill_n(sums, 2 * channels, 0.0);
      strata::kernels::cpu::channel_moments<T>(images, channels, plane, at<T>(x), sums, sums + channels);
    });
  };
  k.batch_norm_apply = [](int, DType t, std::int64_t images, std::int64_t channels, std::int64_t plane, const void* x,
                          const void* mean, const void* rstd, const void* w, const void* b, const void* r, bool relu,
                          void* y) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::batch_norm_apply<T>(images, channels, plane, at<T>(x), at<T>(mean), at<T>(rstd), at<T>(w),
                                                at<T>(b), at<T>(r), relu, at<T>(y));
    });
  };
  k.batch_norm_grad_sums = [](int, DType t, std::int64_t images, std::int64_t channels, std::int64_t plane,
                              const void* x, const void* mean, const void* rstd, void* dy, const void* relu_out,
                              double* sums) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      std::fill_n(sums, 2 * channels, 0.0);
      strata::kernels::cpu::batch_norm_grad_sums<T>(images, channels, plane, at<T>(x), at<T>(mean), at<T>(rstd),
                                                    at<T>(dy), at<T>(relu_out), sums, sums + channels);
    });
  };
  k.batch_norm_input_grad = [](int, DType t, std::int64_t images, std::int64_t channels, std::int64_t plane,
                               const void* x, const void* mean, const void* rstd, const void* w, const void* dy,
                               const void* mdy, const void* mdyh, void* dx, bool acc) {
    floating(t, [&](auto tag) {
      using T = decltype(tag);
      strata::kernels::cpu::batch_norm_input_grad<T>(images, channels, plane, at<T>(x), at<T>(mean), at<T>(rstd),
                                                     at<T>(w), at<T>(dy), at<T>(mdy), at<T>(mdyh), at<T>(dx), acc);
    });
  };
  return k;  // channel_bias_act, channel_sums and the convolutions stay null: convolutions need cuDNN
}

/// Registers the stand-in as this program's CUDA backend and kernels.
inline void install() {
  static const strata::DeviceKernels kernels = make_kernels();
  strata::register_cuda_backend(&backend);
  strata::register_cuda_kernels(&kernels);
}

/// Installed when the program starts (every test file of the program names it, so that none
/// depends on another's being linked in).
inline const bool installed = (install(), true);

}  // namespace support::host_device

/// \file
/// 2-D convolution on the device through cuDNN (NCHW, float32/float64): forward, backward
/// data and backward filter, with the CPU's ConvGeometry. The algorithm of each direction is
/// chosen once per geometry, among those cuDNN ranks first that are deterministic (so a run
/// reproduces itself bitwise) and whose workspace fits the limit; the workspace comes from
/// the device's caching allocator. cuDNN's legacy convolution API (still in cuDNN 9) is used:
/// the graph API would buy fusions this layer does not do yet. Host code only.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_CUDNN
#error "strata's cuDNN convolutions need cuDNN: configure strata with -Dcudnn=enabled (cuDNN 9 in the CUDA toolkit root), or by hand: -DSTRATA_HAS_CUDNN=1 -lcudnn"
#else

#include <cudnn.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include <strata/kernels/math/conv_geometry.hpp>
#include <strata/kernels/cuda/allocator.hpp>
#include <strata/kernels/cuda/blas.hpp>  // tf32_allowed
#include <strata/kernels/cuda/runtime.hpp>

namespace strata::kernels::cuda {

inline void check(cudnnStatus_t rc, const char* call) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  STRATA_THROW(cuda_error, "strata.cudnn", call, " failed: ", cudnnGetErrorString(rc));
}

/// The largest workspace a convolution algorithm may ask for.
inline constexpr std::size_t kConvWorkspaceLimit = std::size_t{256} << 20;

/// The cuDNN handle of `device`, on its compute stream.
inline cudnnHandle_t cudnn_handle(int device) {
  struct Tag;
  return per_device<Tag, cudnnHandle_t>(device, [device] {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    check(cudnnSetStream(h, compute_stream(device)), "cudnnSetStream");
    return h;
  });
}

namespace detail {

/// The four descriptors of one convolution, destroyed with it.
template <class T>
class ConvDescriptors {
 public:
  ConvDescriptors(const math::ConvGeometry& g, std::int64_t out_channels) {
    constexpr cudnnDataType_t dt = std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
    auto i = [](std::int64_t v) { return static_cast<int>(v); };
    check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, i(g.n), i(g.c), i(g.h), i(g.w)),
          "cudnnSetTensor4dDescriptor(x)");
    check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, i(g.n), i(out_channels), i(g.oh()), i(g.ow())),
          "cudnnSetTensor4dDescriptor(y)");
    check(cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, i(out_channels), i(g.c), i(g.kh), i(g.kw)),
          "cudnnSetFilter4dDescriptor");
    // Cross-correlation, as every framework's "convolution"; accumulate in the data type.
    check(cudnnSetConvolution2dDescriptor(conv, i(g.pad), i(g.pad), i(g.stride), i(g.stride), 1, 1,
                                          CUDNN_CROSS_CORRELATION, dt),
          "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionMathType(conv, allowed_math()), "cudnnSetConvolutionMathType");
  }
  /// FMA only (full float32), unless TF32 is allowed (allow_tf32): CUDNN_DEFAULT_MATH lets
  /// float32 convolutions run in TF32 on tensor cores from sm_80 on.
  static cudnnMathType_t allowed_math() {
    return std::is_same_v<T, float> && tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  }
  /// The math type of the algorithm a direction runs (set before each call and size query).
  void use_math(cudnnMathType_t m) const { check(cudnnSetConvolutionMathType(conv, m), "cudnnSetConvolutionMathType"); }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

/// The first of cuDNN's ranked candidates that succeeded, is deterministic, runs in a math
/// type the descriptors allow (no tensor-op math for float32 unless TF32 is allowed) and whose
/// heuristic workspace fits the limit.
template <class Perf>
const Perf& pick(const Perf* perf, int n, cudnnMathType_t allowed, const char* direction) {
  for (int k = 0; k < n; ++k)
    if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].determinism == CUDNN_DETERMINISTIC &&
        (allowed == CUDNN_DEFAULT_MATH || perf[k].mathType == CUDNN_FMA_MATH || perf[k].mathType == CUDNN_DEFAULT_MATH) &&
        perf[k].memory <= kConvWorkspaceLimit)
      return perf[k];
  STRATA_THROW(cuda_error, "strata.cudnn", "no deterministic ", direction, " convolution algorithm fits in ",
               kConvWorkspaceLimit >> 20, " MiB of workspace");
}

using ConvKey = std::tuple<int, int, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

/// The algorithms chosen for one geometry, device, dtype and math mode: each with its math
/// type and its workspace size (as cuDNN computes it for that algorithm and math type).
struct ConvPlan {
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnMathType_t fwd_math;
  std::size_t fwd_bytes;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnMathType_t bwd_data_math;
  std::size_t bwd_data_bytes;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  cudnnMathType_t bwd_filter_math;
  std::size_t bwd_filter_bytes;
};

template <class T>
const ConvPlan& plan(int device, const math::ConvGeometry& g, std::int64_t oc, const ConvDescriptors<T>& d) {
  static std::map<ConvKey, ConvPlan> plans;
  static std::mutex mu;
  const cudnnMathType_t allowed = ConvDescriptors<T>::allowed_math();
  const ConvKey key{device, static_cast<int>(sizeof(T)), allowed == CUDNN_DEFAULT_MATH, g.n, g.c, g.h, g.w, g.kh, g.kw,
                    g.stride, g.pad, oc};
  std::lock_guard lock(mu);
  if (auto it = plans.find(key); it != plans.end()) return it->second;
  cudnnHandle_t h = cudnn_handle(device);
  constexpr int kMax = 16;
  int n = 0;
  ConvPlan p{};
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  check(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMax, &n, fwd),
        "cudnnGetConvolutionForwardAlgorithm_v7");
  const auto& f = pick(fwd, n, allowed, "forward");
  p.fwd = f.algo, p.fwd_math = f.mathType;
  d.use_math(p.fwd_math);
  check(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, p.fwd, &p.fwd_bytes),
        "cudnnGetConvolutionForwardWorkspaceSize");
  d.use_math(allowed);
  cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
  check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMax, &n, bd),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  const auto& b = pick(bd, n, allowed, "backward-data");
  p.bwd_data = b.algo, p.bwd_data_math = b.mathType;
  d.use_math(p.bwd_data_math);
  check(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, p.bwd_data, &p.bwd_data_bytes),
        "cudnnGetConvolutionBackwardDataWorkspaceSize");
  d.use_math(allowed);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
  check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, kMax, &n, bf),
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  const auto& w = pick(bf, n, allowed, "backward-filter");
  p.bwd_filter = w.algo, p.bwd_filter_math = w.mathType;
  d.use_math(p.bwd_filter_math);
  check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, p.bwd_filter, &p.bwd_filter_bytes),
        "cudnnGetConvolutionBackwardFilterWorkspaceSize");
  return plans.emplace(key, p).first->second;
}

/// A workspace block from the device's caching allocator, returned (stream-ordered) on scope exit.
class Workspace {
 public:
  Workspace(int device, std::size_t bytes)
      : alloc_(CachingDeviceAllocator::of(device)), bytes_(bytes), p_(bytes ? alloc_.allocate(bytes) : nullptr) {}
  ~Workspace() { alloc_.deallocate(p_, bytes_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const noexcept { return p_; }

 private:
  CachingDeviceAllocator& alloc_;
  std::size_t bytes_;
  void* p_;
};

}  // namespace detail

/// y = conv(x, w) (NCHW; w is out_channels x c x kh x kw).
template <class T>
void conv2d_forward(int device, const math::ConvGeometry& g, std::int64_t out_channels, const T* x, const T* w, T* y) {
  detail::ConvDescriptors<T> d(g, out_channels);
  const auto& p = detail::plan<T>(device, g, out_channels, d);
  d.use_math(p.fwd_math);
  detail::Workspace ws(device, p.fwd_bytes);
  const T one = 1, zero = 0;
  check(cudnnConvolutionForward(cudnn_handle(device), &one, d.x, x, d.w, w, d.conv, p.fwd, ws.get(), p.fwd_bytes,
                                &zero, d.y, y),
        "cudnnConvolutionForward");
}

/// dx (+)= the gradient of conv(x, w) with respect to x, given dy.
template <class T>
void conv2d_backward_data(int device, const math::ConvGeometry& g, std::int64_t out_channels, const T* w, const T* dy,
                          T* dx, bool accumulate) {
  detail::ConvDescriptors<T> d(g, out_channels);
  const auto& p = detail::plan<T>(device, g, out_channels, d);
  d.use_math(p.bwd_data_math);
  detail::Workspace ws(device, p.bwd_data_bytes);
  const T one = 1, beta = accumulate ? 1 : 0;
  check(cudnnConvolutionBackwardData(cudnn_handle(device), &one, d.w, w, d.y, dy, d.conv, p.bwd_data, ws.get(),
                                     p.bwd_data_bytes, &beta, d.x, dx),
        "cudnnConvolutionBackwardData");
}

/// dw (+)= the gradient of conv(x, w) with respect to w, given dy.
template <class T>
void conv2d_backward_filter(int device, const math::ConvGeometry& g, std::int64_t out_channels, const T* x, const T* dy,
                            T* dw, bool accumulate) {
  detail::ConvDescriptors<T> d(g, out_channels);
  const auto& p = detail::plan<T>(device, g, out_channels, d);
  d.use_math(p.bwd_filter_math);
  detail::Workspace ws(device, p.bwd_filter_bytes);
  const T one = 1, beta = accumulate ? 1 : 0;
  check(cudnnConvolutionBackwardFilter(cudnn_handle(device), &one, d.x, x, d.y, dy, d.conv, p.bwd_filter, ws.get(),
                                       p.bwd_filter_bytes, &beta, d.w, dw),
        "cudnnConvolutionBackwardFilter");
}

}  // namespace strata::kernels::cuda

#endif  // STRATA_HAS_CUDNN

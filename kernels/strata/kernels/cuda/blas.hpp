/// \file
/// Row-major GEMM on the device through cuBLAS, with the CPU's GemmArgs. One cuBLAS handle per
/// device and process, bound to the device's compute stream. TF32 tensor-core math is off
/// (float32 GEMMs are full float32, like the CPU) unless allow_tf32(true) asks for it — the
/// knob PyTorch calls torch.backends.cuda.matmul.allow_tf32. Host code only.
#pragma once

#include <strata/kernels/cuda/runtime.hpp>  // without CUDA: its #error is the only message

#if STRATA_HAS_CUDA

#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <string>
#include <type_traits>

#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cuda {

inline void check(cublasStatus_t rc, const char* call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  STRATA_THROW(cuda_error, "strata.cuda", call, " failed: ", cublasGetStatusName(rc), " (", cublasGetStatusString(rc),
               ")");
}

namespace detail {
inline std::atomic<bool>& tf32_allowed() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace detail

/// Lets float32 GEMMs use TF32 tensor cores (faster, ~10-bit mantissa products). Off by default.
inline void allow_tf32(bool on) noexcept { detail::tf32_allowed().store(on); }
inline bool tf32_allowed() noexcept { return detail::tf32_allowed().load(); }

/// The cuBLAS handle of `device`, on its compute stream.
inline cublasHandle_t blas_handle(int device) {
  struct Tag;
  return per_device<Tag, cublasHandle_t>(device, [device] {
    cublasHandle_t h = nullptr;
    check(cublasCreate(&h), "cublasCreate");
    check(cublasSetStream(h, compute_stream(device)), "cublasSetStream");
    return h;
  });
}

/// C = alpha * op(A) * op(B) + beta * C over row-major device buffers.
template <class T>
void gemm(int device, const math::GemmArgs<T>& g) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cuBLAS GEMM: float or double");
  if (g.has_epilogue() || g.a_row_sums != nullptr)  // the device layers run these as kernels of their own
    STRATA_THROW(invalid_argument, "strata.cuda", "GEMM: a bias or ReLU epilogue, or A's row sums, is a CPU GEMM's only");
  if (g.m == 0 || g.n == 0) return;
  const std::array<std::int64_t, 6> dims{g.m, g.n, g.k, g.lda, g.ldb, g.ldc};
  for (std::int64_t v : dims)
    if (v > INT_MAX) STRATA_THROW(invalid_argument, "strata.cuda", "GEMM dimension ", v, " exceeds cuBLAS's int");
  cublasHandle_t h = blas_handle(device);
  DeviceGuard on(device);
  // Row-major C = A B is column-major C^T = B^T A^T: swap the operands and the m/n extents.
  const auto ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  // k == 0 (C = beta C, as on the CPU): cuBLAS still wants leading dimensions >= 1 for the
  // operands it reads nothing of; a row-major [m, 0] operand has 0.
  const int lda = std::max(1, static_cast<int>(g.lda)), ldb = std::max(1, static_cast<int>(g.ldb));
  if constexpr (std::is_same_v<T, float>) {
    check(cublasSetMathMode(h, tf32_allowed() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
    check(cublasSgemm(h, tb, ta, n, m, k, &g.alpha, g.b, ldb, g.a, lda,
                      &g.beta, g.c, static_cast<int>(g.ldc)),
          "cublasSgemm");
  } else {
    check(cublasDgemm(h, tb, ta, n, m, k, &g.alpha, g.b, ldb, g.a, lda,
                      &g.beta, g.c, static_cast<int>(g.ldc)),
          "cublasDgemm");
  }
}

/// `batch` GEMMs as gemm() does one, operand i `stride_*` elements after operand i - 1, in
/// one cuBLAS call (the attention's products of every sequence and head: thousands of tiny
/// launches otherwise).
template <class T>
void gemm_strided_batched(int device, const math::GemmArgs<T>& g, std::int64_t stride_a, std::int64_t stride_b,
                          std::int64_t stride_c, std::int64_t batch) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cuBLAS GEMM: float or double");
  if (g.has_epilogue() || g.a_row_sums != nullptr)
    STRATA_THROW(invalid_argument, "strata.cuda", "GEMM: a bias or ReLU epilogue, or A's row sums, is a CPU GEMM's only");
  if (g.m == 0 || g.n == 0 || batch == 0) return;
  const std::array<std::int64_t, 7> dims{g.m, g.n, g.k, g.lda, g.ldb, g.ldc, batch};
  for (std::int64_t v : dims)
    if (v > INT_MAX) STRATA_THROW(invalid_argument, "strata.cuda", "GEMM dimension ", v, " exceeds cuBLAS's int");
  cublasHandle_t h = blas_handle(device);
  DeviceGuard on(device);
  const auto ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int lda = std::max(1, static_cast<int>(g.lda)), ldb = std::max(1, static_cast<int>(g.ldb));
  const int count = static_cast<int>(batch);
  if constexpr (std::is_same_v<T, float>) {
    check(cublasSetMathMode(h, tf32_allowed() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
    check(cublasSgemmStridedBatched(h, tb, ta, n, m, k, &g.alpha, g.b, ldb, stride_b, g.a, lda, stride_a, &g.beta,
                                    g.c, static_cast<int>(g.ldc), stride_c, count),
          "cublasSgemmStridedBatched");
  } else {
    check(cublasDgemmStridedBatched(h, tb, ta, n, m, k, &g.alpha, g.b, ldb, stride_b, g.a, lda, stride_a, &g.beta,
                                    g.c, static_cast<int>(g.ldc), stride_c, count),
          "cublasDgemmStridedBatched");
  }
}

}  // namespace strata::kernels::cuda

#endif  // STRATA_HAS_CUDA

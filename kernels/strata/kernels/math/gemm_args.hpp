/// \file
/// GemmArgs: the operand layout of one row-major GEMM call, C = alpha * op(A) * op(B) + beta * C,
/// taken by the CPU GEMM (kernels/cpu/gemm.hpp) and the cuBLAS one (kernels/cuda/blas.hpp),
/// and on the CPU an epilogue: a bias and a ReLU applied to C as it is written (a layer's
/// bias and activation without another pass over its output).
#pragma once

#include <cstdint>

namespace strata::kernels::math {

/// Operand layout of one GEMM call; lda/ldb/ldc are row strides in elements.
template <class T>
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  T alpha = 1;
  const T* a = nullptr;
  std::int64_t lda = 0;
  const T* b = nullptr;
  std::int64_t ldb = 0;
  T beta = 0;
  T* c = nullptr;
  std::int64_t ldc = 0;
  // The epilogue, in this order after the product (CPU only: the device GEMM refuses it).
  const T* col_bias = nullptr;  ///< C[i, j] += col_bias[j] (a linear layer's bias)
  const T* row_bias = nullptr;  ///< C[i, j] += row_bias[i] (a convolution's, per output channel)
  bool relu = false;            ///< C = max(C, 0), a NaN giving 0

  bool has_epilogue() const noexcept { return col_bias != nullptr || row_bias != nullptr || relu; }
};

}  // namespace strata::kernels::math

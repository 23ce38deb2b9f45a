/// \file
/// GemmArgs: the operand layout of one row-major GEMM call, C = alpha * op(A) * op(B) + beta * C,
/// taken by the CPU GEMM (kernels/cpu/gemm.hpp) and the cuBLAS one (kernels/cuda/blas.hpp),
/// and on the CPU an epilogue: a bias and a ReLU applied to C as it is written (a layer's
/// bias and activation without another pass over its output), and op(A)'s row sums taken as
/// A is read (a layer's bias gradient without another pass over its output gradient).
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
  // Beside the product (CPU only): a_row_sums[i] += Σ_p op(A)(i, p), unscaled (a linear
  // layer's bias gradient, the column sums of G, with its weight gradient Gᵀ X).
  T* a_row_sums = nullptr;

  bool has_epilogue() const noexcept { return col_bias != nullptr || row_bias != nullptr || relu; }
};

}  // namespace strata::kernels::math

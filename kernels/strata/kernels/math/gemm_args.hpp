/// \file
/// GemmArgs: the operand layout of one row-major GEMM call, C = alpha * op(A) * op(B) + beta * C,
/// taken by the CPU GEMM (kernels/cpu/gemm.hpp) and the cuBLAS one (kernels/cuda/blas.hpp).
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
};

}  // namespace strata::kernels::math

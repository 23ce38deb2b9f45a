/// \file
/// A GEMM's epilogue (GemmArgs: col_bias, row_bias, relu) as a pass of its own over C, for
/// the kernels that cannot apply it as they write C: the built-in one, OpenBLAS, and the
/// AVX-512 kernel's early and transposed exits. The AVX-512 kernel's tiles apply the same
/// operations in the same order where they store, so every kernel gives the same bits as a
/// product followed by a separate bias-and-activation pass. add_a_row_sums is the pass of
/// op(A)'s row sums (GemmArgs::a_row_sums) for the kernels that do not take them as they read A.
#pragma once

#include <cstdint>

#include <strata/config.hpp>  // STRATA_RESTRICT
#include <strata/kernels/cpu/elementwise.hpp>  // bias_act_inplace, row_bias_act_inplace
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

/// v plus the biases of element (i, j), then the ReLU: the epilogue of one element.
template <class T>
inline T epilogue_value(const math::GemmArgs<T>& g, std::int64_t i, std::int64_t j, T v) {
  if (g.col_bias != nullptr) v = v + g.col_bias[j];
  if (g.row_bias != nullptr) v = v + g.row_bias[i];
  if (g.relu) v = v > T(0) ? v : T(0);
  return v;
}

/// Applies g's epilogue to C[0:m, 0:n] in place, a row at a time in vector passes.
template <class T>
void apply_epilogue(const math::GemmArgs<T>& g) {
  if (!g.has_epilogue()) return;
  for (std::int64_t i = 0; i < g.m; ++i) {
    T* ci = g.c + i * g.ldc;
    if (g.col_bias != nullptr || g.row_bias == nullptr)  // the column bias, or the ReLU alone
      bias_act_inplace<T>(1, g.n, ci, g.col_bias, g.relu && g.row_bias == nullptr);
    if (g.row_bias != nullptr) row_bias_act_inplace<T>(1, g.n, ci, g.row_bias + i, g.relu);
  }
}

/// C[0:m, 0:n] = beta * C, before a product is added to it; beta == 0 overwrites, so NaNs
/// already in C do not survive.
template <class T>
void scale_by_beta(const math::GemmArgs<T>& g) {
  if (g.beta == T(1)) return;
  for (std::int64_t i = 0; i < g.m; ++i) {
    T* row = g.c + i * g.ldc;
    if (g.beta == T(0))
      for (std::int64_t j = 0; j < g.n; ++j) row[j] = T(0);
    else
      for (std::int64_t j = 0; j < g.n; ++j) row[j] *= g.beta;
  }
}

/// C = from^T + beta * C, then g's epilogue, where from holds the product transposed (n x m,
/// row stride m): how the kernels that compute Cᵀ = op(B)ᵀ op(A)ᵀ for wide products with few
/// rows land their result.
template <class T>
void store_transposed(const math::GemmArgs<T>& g, const T* from_t) {
  const bool plain = !g.has_epilogue();
  for (std::int64_t i = 0; i < g.m; ++i) {
    T* ci = g.c + i * g.ldc;
    const T* from = from_t + i;
    if (g.beta == T(0) && plain)
      for (std::int64_t j = 0; j < g.n; ++j) ci[j] = from[j * g.m];
    else if (plain)
      for (std::int64_t j = 0; j < g.n; ++j) ci[j] = from[j * g.m] + g.beta * ci[j];
    else if (g.beta == T(0))
      for (std::int64_t j = 0; j < g.n; ++j) ci[j] = epilogue_value(g, i, j, from[j * g.m]);
    else
      for (std::int64_t j = 0; j < g.n; ++j) ci[j] = epilogue_value(g, i, j, from[j * g.m] + g.beta * ci[j]);
  }
}

/// g.a_row_sums[i] += Σ_p op(A)(i, p) over the whole depth, in p order (nothing without them).
template <class T>
void add_a_row_sums(const math::GemmArgs<T>& g) {
  if (g.a_row_sums == nullptr) return;
  T* STRATA_RESTRICT out = g.a_row_sums;
  if (g.trans_a) {  // op(A)(i, p) = a[p * lda + i]: a row of a at a time, vectorised across i
    for (std::int64_t p = 0; p < g.k; ++p) {
      const T* STRATA_RESTRICT row = g.a + p * g.lda;
      for (std::int64_t i = 0; i < g.m; ++i) out[i] += row[i];
    }
    return;
  }
  for (std::int64_t i = 0; i < g.m; ++i) {
    const T* STRATA_RESTRICT row = g.a + i * g.lda;
    T acc = 0;
    for (std::int64_t p = 0; p < g.k; ++p) acc += row[p];
    out[i] += acc;
  }
}

}  // namespace strata::kernels::cpu

/// \file
/// A GEMM over operands rounded to a 16-bit type, on any CPU: op(A) and op(B) rounded into
/// float copies row by row, then the float GEMM over them. The product of two bfloat16 or two
/// float16 values is exact in float (8 + 8 and 11 + 11 significand bits, at most float's 24),
/// so this is the 16-bit GEMM's arithmetic at float's speed: the fallback of the bfloat16 GEMM
/// and the float16 GEMM (gemm_bf16.hpp, gemm_f16.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/cpu/gemm_epilogue.hpp>  // add_a_row_sums
#include <strata/kernels/math/gemm_args.hpp>

namespace strata::kernels::cpu {

/// Rounds n floats of `from` into `to`.
using RoundRow = void (*)(const float* from, float* to, std::int64_t n);

/// C = alpha * r(op(A)) * r(op(B)) + beta * C and g's epilogue, r being `round_row`; op(A)'s
/// row sums (a layer's bias gradient) are taken from the float operand.
inline void gemm_rounded_operands(const math::GemmArgs<float>& g, RoundRow round_row) {
  thread_local std::vector<float> a, b;
  const auto rounded = [&](std::vector<float>& to, const float* from, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld) {
    to.resize(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r) round_row(from + r * ld, to.data() + r * cols, cols);
  };
  const std::int64_t a_cols = g.trans_a ? g.m : g.k, b_cols = g.trans_b ? g.k : g.n;
  rounded(a, g.a, g.trans_a ? g.k : g.m, a_cols, g.lda);
  rounded(b, g.b, g.trans_b ? g.n : g.k, b_cols, g.ldb);
  add_a_row_sums(g);
  math::GemmArgs<float> r = g;
  r.a = a.data();
  r.lda = a_cols;
  r.b = b.data();
  r.ldb = b_cols;
  r.a_row_sums = nullptr;
  gemm(r);
}

}  // namespace strata::kernels::cpu

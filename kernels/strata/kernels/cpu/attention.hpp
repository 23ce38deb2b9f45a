/// \file
/// Self-attention of heads packed in one projection, forward and backward, on the CPU: each
/// head's q, k and v are read in place from qkv [B, T, 3W] (row stride 3W), its output is
/// written merged into [B, T, W] (row stride W), and its gradients straight into the three
/// parts of dqkv, so neither the heads' split nor their merge costs a copy. Under a causal mask
/// the products are taken in blocks of kAttentionRows query rows, each over only the keys its
/// last row sees: the blocks the mask zeroes (about 40 % of the scores at T = 64) are never
/// computed, and never read.
#pragma once

#include <algorithm>  // std::min
#include <cstdint>
#include <type_traits>

#include <strata/kernels/cpu/attention_avx512.hpp>  // the fused scores and softmax, the transposes
#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/cpu/small_gemm_avx512.hpp>
#include <strata/kernels/cpu/softmax.hpp>  // softmax_forward, softmax_backward

namespace strata::kernels::cpu {

/// The shape of a packed self-attention: `batch` sequences of `tokens`, `heads` heads of
/// `head_width` columns each (W = heads * head_width).
struct AttentionShape {
  std::int64_t batch = 0, tokens = 0, heads = 0, head_width = 0;
  bool causal = false;
  std::int64_t width() const noexcept { return heads * head_width; }
};

/// Query rows per block of the causal products.
inline constexpr std::int64_t kAttentionRows = 16;

namespace detail {

/// C [m, n] = op(A) B, or C += op(A) B: one head's product. In float where strata's AVX-512
/// kernel runs the GEMMs, B is read in place (small_gemm_avx512.hpp); otherwise a GEMM call.
template <class T>
void product(bool ta, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
             std::int64_t ldb, bool accumulate, T* c, std::int64_t ldc) {
#ifdef STRATA_GEMM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (gemm_kernel().avx512()) return avx512::small_gemm(ta, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
#endif
  gemm(math::GemmArgs<T>{ta, false, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc});
}

/// Asks L2 for `rows` rows of `cols` elements, `ld` apart: the next head's operands, fetched
/// while this head computes (a head's rows are lines far apart, which the hardware prefetcher
/// does not pick up before the head's small products are done). Into L2, not L1: a head's
/// own operands, turned keys and probabilities fill a 32 KiB L1, and the next head's lines
/// brought there evicted them (on Zen 4 no faster than no prefetch at all).
template <class T>
void prefetch_rows(const T* p, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  constexpr auto line = static_cast<std::int64_t>(64 / sizeof(T));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; c += line) __builtin_prefetch(p + r * ld + c, 0, 2);
}

/// dst [cols, rows] = src [rows, cols] (row stride ld): a head's keys or values turned so that
/// the products read them as an untransposed operand (the GEMM packs a transposed one on every
/// call, which costs more than these small products themselves).
template <class T>
void transpose_into(std::int64_t rows, std::int64_t cols, const T* src, std::int64_t ld, T* dst) {
#ifdef STRATA_ATTENTION_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) return avx512::transpose_into(rows, cols, src, ld, dst);
#endif
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

/// Calls f(r0, r1, keys) for the blocks of query rows [r0, r1) and the keys [0, keys) they see.
template <class F>
void for_each_row_block(const AttentionShape& s, F&& f) {
  const std::int64_t T = s.tokens, rows = s.causal ? kAttentionRows : T;
  for (std::int64_t r0 = 0; r0 < T; r0 += rows) {
    const std::int64_t r1 = std::min(T, r0 + rows);
    f(r0, r1, s.causal ? r1 : T);
  }
}

/// Whether a head's scores and softmax are taken together in registers
/// (attention_avx512.hpp): float on AVX-512, every row's keys in one fused tile.
template <class T>
bool fused_softmax(const AttentionShape& s) {
#ifdef STRATA_ATTENTION_AVX512
  if constexpr (std::is_same_v<T, float>) return s.tokens <= avx512::kFusedKeys && has_avx512f();
#endif
  (void)s;
  return false;
}

}  // namespace detail

/// Elements of the scratch attention_forward and attention_backward take.
inline std::int64_t attention_scratch(const AttentionShape& s) {
  return 2 * s.tokens * s.tokens + s.head_width * s.tokens;
}

/// out [B, T, W] = the heads' softmax(scale q kᵀ, masked) v, merged; probs [B, H, T, T]
/// receives the attention weights (0 where masked) for the backward pass; scratch holds
/// attention_scratch(s) elements.
template <class T>
void attention_forward(const AttentionShape& s, const T* qkv, T scale, T* probs, T* scratch, T* out) {
  const std::int64_t Tn = s.tokens, D = s.head_width, W = s.width(), ld = 3 * W;
  T *scores = scratch, *kt = scratch + 2 * Tn * Tn;
  const bool fused = detail::fused_softmax<T>(s);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const T* q = qkv + b * Tn * ld + h * D;
      const T *k = q + W, *v = q + 2 * W;
      T* p = probs + (b * s.heads + h) * Tn * Tn;
      T* o = out + b * Tn * W + h * D;
      if (h + 1 < s.heads || b + 1 < s.batch) {  // the next head's q, k and v
        const T* next = h + 1 < s.heads ? q + D : qkv + (b + 1) * Tn * ld;
        for (int part = 0; part < 3; ++part) detail::prefetch_rows(next + part * W, Tn, D, ld);
      }
      detail::transpose_into<T>(Tn, D, k, ld, kt);
      if (fused) {
#ifdef STRATA_ATTENTION_AVX512
        if constexpr (std::is_same_v<T, float>)
          detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
            avx512::attention_probs(r1 - r0, D, q + r0 * ld, ld, kt, Tn, scale, r0 + 1, s.causal, keys, p + r0 * Tn, Tn, Tn);
          });
#endif
      } else {
        detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
          detail::product<T>(false, r1 - r0, keys, D, q + r0 * ld, ld, kt, Tn, false, scores + r0 * Tn, Tn);
        });
        softmax_forward<T>(Tn, Tn, scores, p, scale, s.causal ? Tn : 0);  // query r sees the keys [0, r]
      }
      detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
        detail::product<T>(false, r1 - r0, D, keys, p + r0 * Tn, Tn, v, ld, false, o + r0 * W, W);
      });
    }
}

/// dqkv [B, T, 3W] (+)= the gradient of attention_forward's out through dout [B, T, W], from
/// qkv and the forward's probs; scratch holds attention_scratch(s) elements.
template <class T>
void attention_backward(const AttentionShape& s, const T* qkv, const T* probs, const T* dout, T scale, T* scratch,
                        T* dqkv, bool accumulate) {
  const std::int64_t Tn = s.tokens, D = s.head_width, W = s.width(), ld = 3 * W;
  T *dprobs = scratch, *dscores = scratch + Tn * Tn, *vt = scratch + 2 * Tn * Tn;
  const bool fused = detail::fused_softmax<T>(s);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const T* q = qkv + b * Tn * ld + h * D;
      const T *k = q + W, *v = q + 2 * W;
      const T* p = probs + (b * s.heads + h) * Tn * Tn;
      const T* dO = dout + b * Tn * W + h * D;
      T* dq = dqkv + b * Tn * ld + h * D;
      T *dk = dq + W, *dv = dq + 2 * W;
      if (h + 1 < s.heads || b + 1 < s.batch) {  // the next head's operands, and the gradients it writes
        const std::int64_t nb = h + 1 < s.heads ? b : b + 1, nh = h + 1 < s.heads ? h + 1 : 0;
        for (int part = 0; part < 3; ++part) {
          detail::prefetch_rows(qkv + nb * Tn * ld + nh * D + part * W, Tn, D, ld);
          detail::prefetch_rows(dqkv + nb * Tn * ld + nh * D + part * W, Tn, D, ld);
        }
        detail::prefetch_rows(probs + (nb * s.heads + nh) * Tn * Tn, Tn, Tn, Tn);
        detail::prefetch_rows(dout + nb * Tn * W + nh * D, Tn, D, W);
      }
      // dP = dO vᵀ over the seen keys; dS = the softmax's backward of it, 0 where masked.
      detail::transpose_into<T>(Tn, D, v, ld, vt);
      if (fused) {
#ifdef STRATA_ATTENTION_AVX512
        if constexpr (std::is_same_v<T, float>)
          detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
            avx512::attention_dscores(r1 - r0, D, dO + r0 * W, W, vt, Tn, p + r0 * Tn, Tn, scale, r0 + 1, s.causal, keys,
                                      dscores + r0 * Tn, Tn, Tn);
          });
#endif
      } else {
        detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
          detail::product<T>(false, r1 - r0, keys, D, dO + r0 * W, W, vt, Tn, false, dprobs + r0 * Tn, Tn);
        });
        softmax_backward<T>(Tn, Tn, p, dprobs, scale, dscores, false, s.causal ? Tn : 0);
      }
      // dq = dS k, over the keys each block of queries saw.
      detail::for_each_row_block(s, [&](std::int64_t r0, std::int64_t r1, std::int64_t keys) {
        detail::product<T>(false, r1 - r0, D, keys, dscores + r0 * Tn, Tn, k, ld, accumulate, dq + r0 * ld, ld);
      });
      // dk = dSᵀ q and dv = Pᵀ dO: key j is seen by the queries from j on (all of them without
      // the mask), so a block of keys [j0, j1) sums over the queries [j0, T).
      detail::for_each_row_block(s, [&](std::int64_t j0, std::int64_t j1, std::int64_t) {
        const std::int64_t i0 = s.causal ? j0 : 0;
        detail::product<T>(true, j1 - j0, D, Tn - i0, dscores + i0 * Tn + j0, Tn, q + i0 * ld, ld, accumulate,
                           dk + j0 * ld, ld);
        detail::product<T>(true, j1 - j0, D, Tn - i0, p + i0 * Tn + j0, Tn, dO + i0 * W, W, accumulate, dv + j0 * ld, ld);
      });
    }
}

}  // namespace strata::kernels::cpu

/// \file
/// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C, where op(X) is X or X^T, then the
/// epilogue GemmArgs names (a bias, a ReLU; gemm_epilogue.hpp).
/// gemm() runs the kernel gemm_kernel() chose for this process: CBLAS (OpenBLAS) when the
/// build has it, strata's AVX-512 kernel for float where the CPU has AVX-512 and OpenBLAS runs
/// narrower kernels (gemm_avx512.hpp), and the built-in blocked kernel otherwise; each is
/// callable directly so tests can hold them against each other. Including it has OpenBLAS run
/// the kernels of this CPU's vector width (blas_core.hpp).
#pragma once

#include <algorithm>  // std::min
#include <cstdint>
#include <cstdio>   // std::fprintf
#include <string>
#include <string_view>
#include <type_traits>  // std::is_same_v
#include <vector>

#include <strata/config.hpp>  // STRATA_HAS_BLAS, STRATA_RESTRICT
#include <strata/support/environment.hpp>
#include <strata/kernels/cpu/blas_core.hpp>
#include <strata/kernels/cpu/gemm_avx512.hpp>
#include <strata/kernels/cpu/gemm_epilogue.hpp>
#include <strata/kernels/math/gemm_args.hpp>

#if STRATA_HAS_BLAS
#include <cblas.h>
#endif

namespace strata::kernels::cpu {

using math::GemmArgs;  // the operand layout (kernels/math/gemm_args.hpp)

namespace detail {

// Register block of the micro-kernel: MR rows of A times NR columns of B, 32 bytes of B per row.
template <class T> inline constexpr int kMR = 4;
template <class T> inline constexpr int kNR = 32 / sizeof(T) * 2;
inline constexpr std::int64_t kMC = 64, kKC = 256, kNC = 512;

template <class T>
inline void micro_kernel(std::int64_t kc, const T* STRATA_RESTRICT ap, const T* STRATA_RESTRICT bp, T* c,
                         std::int64_t ldc, T alpha, int mr, int nr) {
  constexpr int MR = kMR<T>, NR = kNR<T>;
  T acc[MR][NR] = {};
  for (std::int64_t p = 0; p < kc; ++p) {
    const T* a = ap + p * MR;
    const T* b = bp + p * NR;
    for (int i = 0; i < MR; ++i) {
      const T ai = a[i];
      for (int j = 0; j < NR; ++j) acc[i][j] += ai * b[j];
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] += alpha * acc[i][j];
}

}  // namespace detail

/// The built-in blocked GEMM: packs panels of A and B into cache-sized buffers and runs an
/// MR x NR register-blocked micro-kernel over them.
template <class T>
void gemm_builtin(const GemmArgs<T>& g) {
  using namespace detail;
  constexpr int MR = kMR<T>, NR = kNR<T>;
  scale_by_beta(g);
  add_a_row_sums(g);
  if (g.k == 0 || g.alpha == T(0)) return apply_epilogue(g);
  auto A = [&](std::int64_t i, std::int64_t p) { return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]; };
  auto B = [&](std::int64_t p, std::int64_t j) { return g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j]; };
  thread_local std::vector<T> apack, bpack;
  apack.resize(static_cast<std::size_t>(kMC * kKC));
  bpack.resize(static_cast<std::size_t>(kKC * (kNC + NR)));
  for (std::int64_t jc = 0; jc < g.n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, g.n - jc);
    for (std::int64_t pc = 0; pc < g.k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, g.k - pc);
      // Pack B[pc:pc+kc, jc:jc+nc] as column panels of width NR, zero-padded.
      for (std::int64_t jr = 0; jr < nc; jr += NR) {
        T* dst = bpack.data() + jr * kc;
        const int nr = static_cast<int>(std::min<std::int64_t>(NR, nc - jr));
        for (std::int64_t p = 0; p < kc; ++p)
          for (int j = 0; j < NR; ++j) dst[p * NR + j] = j < nr ? B(pc + p, jc + jr + j) : T(0);
      }
      for (std::int64_t ic = 0; ic < g.m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, g.m - ic);
        for (std::int64_t ir = 0; ir < mc; ir += MR) {
          T* dst = apack.data() + ir * kc;
          const int mr = static_cast<int>(std::min<std::int64_t>(MR, mc - ir));
          for (std::int64_t p = 0; p < kc; ++p)
            for (int i = 0; i < MR; ++i) dst[p * MR + i] = i < mr ? A(ic + ir + i, pc + p) : T(0);
        }
        for (std::int64_t jr = 0; jr < nc; jr += NR) {
          const int nr = static_cast<int>(std::min<std::int64_t>(NR, nc - jr));
          for (std::int64_t ir = 0; ir < mc; ir += MR) {
            const int mr = static_cast<int>(std::min<std::int64_t>(MR, mc - ir));
            micro_kernel<T>(kc, apack.data() + ir * kc, bpack.data() + jr * kc,
                            g.c + (ic + ir) * g.ldc + jc + jr, g.ldc, g.alpha, mr, nr);
          }
        }
      }
    }
  }
  apply_epilogue(g);
}

#if STRATA_HAS_BLAS
/// GEMM through CBLAS.
template <class T>
void gemm_blas(const GemmArgs<T>& g) {
  if (g.m == 0 || g.n == 0) return add_a_row_sums(g);
  const auto ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(g.m), N = static_cast<blasint>(g.n), K = static_cast<blasint>(g.k);
  // CBLAS rejects a leading dimension of 0 even when the matrix is empty.
  const auto lda = static_cast<blasint>(std::max<std::int64_t>(g.lda, 1));
  const auto ldb = static_cast<blasint>(std::max<std::int64_t>(g.ldb, 1));
  const auto ldc = static_cast<blasint>(std::max<std::int64_t>(g.ldc, 1));
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, g.alpha, g.a, lda, g.b, ldb, g.beta, g.c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, g.alpha, g.a, lda, g.b, ldb, g.beta, g.c, ldc);
  apply_epilogue(g);
  add_a_row_sums(g);
}
#endif

/// The kernel that runs float GEMMs in this process, and why (gemm_kernel()).
struct GemmKernel {
  std::string name;    ///< "strata-avx512", "strata-avx512+openblas", "openblas" or "builtin"
  std::string reason;  ///< why this one
  /// strata's AVX-512 kernel runs the float GEMMs, all of them or (split()) those it leads.
  bool avx512() const noexcept { return name.rfind("strata-avx512", 0) == 0; }
  /// OpenBLAS keeps the products whose A is read transposed (the weight gradients, G^T X).
  bool split() const noexcept { return name == "strata-avx512+openblas"; }
};

namespace detail {

/// True for OpenBLAS's kernels that use AVX-512.
inline bool is_avx512_core(std::string_view name) {
  const std::string n = lowercase(name);
  return n == "skylakex" || n == "cooperlake" || n == "sapphirerapids";
}

/// The float GEMM kernel for this process: STRATA_GEMM=auto (the default), strata (strata's
/// AVX-512 kernel wherever the CPU has AVX-512) or blas (OpenBLAS, or the built-in kernel in a
/// build without it). auto takes strata's AVX-512 kernel on a CPU with AVX-512 unless
/// OpenBLAS runs AVX-512 kernels of its own (docs/performance.md, "GEMM kernels").
inline GemmKernel select_gemm_kernel() {
  const char* env = environment::get("STRATA_GEMM");
  std::string_view mode = env ? env : "";
  std::string note;
  if (!mode.empty() && mode != "auto" && mode != "strata" && mode != "blas") {
    note = "; STRATA_GEMM='" + std::string(mode) + "' is none of auto, strata, blas";
    std::fprintf(stderr, "[strata.kernels] STRATA_GEMM='%s' is none of auto, strata, blas: auto\n", env);
    mode = "auto";
  }
  const std::string fallback = STRATA_HAS_BLAS ? "openblas" : "builtin";
  if (!has_avx512f())
    return {fallback, (mode == "strata" ? "STRATA_GEMM=strata, but this CPU has no AVX-512" : "this CPU has no AVX-512") + note};
  if (mode == "strata") return {"strata-avx512", "STRATA_GEMM=strata"};
  if (mode == "blas") return {fallback, "STRATA_GEMM=blas"};
#if STRATA_HAS_BLAS
  const std::string& core = blas_core().used;
  if (is_avx512_core(core))
    return {"strata-avx512+openblas", "OpenBLAS runs its AVX-512 kernels (" + core +
                                          "): strata's takes the products that read A by rows, OpenBLAS the "
                                          "transposed ones" + note};
  return {"strata-avx512", "OpenBLAS runs its " + core + " kernels, narrower than this CPU's AVX-512" + note};
#else
  return {"strata-avx512", "this CPU has AVX-512 and the build has no OpenBLAS" + note};
#endif
}

}  // namespace detail

/// The kernel that runs float GEMMs, chosen once per process (double GEMMs run OpenBLAS, or the
/// built-in kernel without it).
inline const GemmKernel& gemm_kernel() {
  static const GemmKernel kernel = detail::select_gemm_kernel();
  return kernel;
}

/// GEMM through the fastest implementation this build has on this CPU.
template <class T>
void gemm(const GemmArgs<T>& g) {
#ifdef STRATA_GEMM_AVX512
  if constexpr (std::is_same_v<T, float>) {
    // strata's kernel is single-threaded: OpenBLAS keeps the GEMMs it was given threads for.
    const GemmKernel& kernel = gemm_kernel();
    if (kernel.avx512() && !(kernel.split() && g.trans_a)
#if STRATA_HAS_BLAS
        && openblas_get_num_threads() == 1
#endif
    ) {
      gemm_avx512(g);
      return;
    }
  }
#endif
#if STRATA_HAS_BLAS
  gemm_blas(g);
#else
  gemm_builtin(g);
#endif
}

/// Sets the number of threads the BLAS library may use (no effect on the built-in kernel).
inline void set_blas_threads(int n) {
#if STRATA_HAS_BLAS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace strata::kernels::cpu

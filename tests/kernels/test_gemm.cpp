#include "doctest.hpp"
#include "support/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <strata/kernels/cpu/gemm.hpp>
#include <strata/kernels/cpu/small_gemm_avx512.hpp>

namespace {

template <class T>
using GemmFn = void (*)(const strata::kernels::cpu::GemmArgs<T>&);

template <class T>
void check_against_reference(GemmFn<T> gemm, double tol) {
  for (std::int64_t m : {1, 7, 33, 130})
    for (std::int64_t n : {1, 5, 40, 97})
      for (std::int64_t k : {1, 3, 64, 300})
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          const auto a = ref::random_vector(static_cast<std::size_t>(m * k), 1);
          const auto b = ref::random_vector(static_cast<std::size_t>(k * n), 2);
          const auto c0 = ref::random_vector(static_cast<std::size_t>(m * n), 3);
          const auto ab = ref::matmul(ta, tb, m, n, k, a, b);
          const auto col_bias = ref::random_vector(static_cast<std::size_t>(n), 4);
          const auto row_bias = ref::random_vector(static_cast<std::size_t>(m), 5);
          const std::vector<T> cb(col_bias.begin(), col_bias.end()), rb(row_bias.begin(), row_bias.end());
          for (double beta : {0.0, 1.0, 0.5})
            for (int e = 0; e < 4; ++e) {  // no epilogue; column bias; row bias and ReLU; column bias and ReLU
              std::vector<T> A(a.begin(), a.end()), B(b.begin(), b.end()), C(c0.begin(), c0.end());
              std::vector<T> sums(static_cast<std::size_t>(m), T(0.25));  // op(A)'s row sums are added to these
              strata::kernels::cpu::GemmArgs<T> g{ta, tb, m, n, k, T(1.5), A.data(), ta ? m : k, B.data(), tb ? k : n,
                                                  static_cast<T>(beta), C.data(), n};
              g.col_bias = e == 1 || e == 3 ? cb.data() : nullptr;
              g.row_bias = e == 2 ? rb.data() : nullptr;
              g.relu = e >= 2;
              g.a_row_sums = beta == 0.5 ? sums.data() : nullptr;
              gemm(g);
              if (g.a_row_sums != nullptr) {
                std::vector<double> want_sums(sums.size(), 0.25);
                for (std::int64_t i = 0; i < m; ++i)
                  for (std::int64_t p = 0; p < k; ++p)
                    want_sums[static_cast<std::size_t>(i)] += a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)];
                INFO("row sums: m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " epilogue=", e);
                CHECK(ref::max_rel_diff(std::vector<double>(sums.begin(), sums.end()), want_sums) < tol);
              }
              std::vector<double> want(ab.size()), got(C.begin(), C.end());
              for (std::int64_t i = 0; i < m; ++i)
                for (std::int64_t j = 0; j < n; ++j) {
                  const auto at = static_cast<std::size_t>(i * n + j);
                  double v = 1.5 * ab[at] + beta * c0[at];
                  if (g.col_bias) v += col_bias[static_cast<std::size_t>(j)];
                  if (g.row_bias) v += row_bias[static_cast<std::size_t>(i)];
                  want[at] = g.relu ? std::max(v, 0.0) : v;
                }
              INFO("m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " beta=", beta, " epilogue=", e);
              CHECK(ref::max_rel_diff(got, want) < tol);
            }
        }
}

}  // namespace

TEST_CASE("Kernels.Gemm.BuiltinMatchesFloat64Reference") {
  check_against_reference<float>(&strata::kernels::cpu::gemm_builtin<float>, 1e-4);
  check_against_reference<double>(&strata::kernels::cpu::gemm_builtin<double>, 1e-12);
}

TEST_CASE("Kernels.Gemm.BetaZeroIgnoresGarbageInC") {
  std::vector<float> A{1, 2}, B{3, 4}, C{NAN};
  strata::kernels::cpu::GemmArgs<float> g{false, false, 1, 1, 2, 1.f, A.data(), 2, B.data(), 1, 0.f, C.data(), 1};
  strata::kernels::cpu::gemm_builtin(g);
  CHECK(C[0] == 11.f);
}

#if STRATA_HAS_BLAS
TEST_CASE("Kernels.Gemm.BlasMatchesFloat64Reference") {
  check_against_reference<float>(&strata::kernels::cpu::gemm_blas<float>, 1e-4);
  check_against_reference<double>(&strata::kernels::cpu::gemm_blas<double>, 1e-12);
}
#endif

TEST_CASE("Kernels.Gemm.DispatchMatchesFloat64Reference") {
  // gemm() itself, through whichever kernel gemm_kernel() chose for this process.
  check_against_reference<float>(&strata::kernels::cpu::gemm<float>, 1e-4);
  check_against_reference<double>(&strata::kernels::cpu::gemm<double>, 1e-12);
}

#ifdef STRATA_GEMM_AVX512
namespace {

// Every edge of the AVX-512 kernel's blocking: rows around its 12-row tiles, columns around its
// 32-column panels and its 1024-column blocks, depths around its 256-deep blocks; operands with
// row strides past their widths, and C's columns past n left untouched. Wide shapes with few
// rows take its transposed route (Cᵀ = op(B)ᵀ op(A)ᵀ, with B transposed or deep), the others
// its direct one.
void check_avx512_shape(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha, float beta,
                        GemmFn<float> run = &strata::kernels::cpu::gemm_avx512);

// The epilogue as the tiles (or the transposed route's copy) apply it: the same bits as the
// product followed by the separate pass, on every edge of the blocking.
void check_avx512_epilogue(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float beta) {
  const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
  const auto a = ref::random_vector(static_cast<std::size_t>((ta ? k : m) * lda), 21);
  const auto b = ref::random_vector(static_cast<std::size_t>((tb ? n : k) * ldb), 22);
  const auto c0 = ref::random_vector(static_cast<std::size_t>(m * ldc), 23);
  const auto cb = ref::random_vector(static_cast<std::size_t>(n), 24), rb = ref::random_vector(static_cast<std::size_t>(m), 25);
  const std::vector<float> A(a.begin(), a.end()), B(b.begin(), b.end()), CB(cb.begin(), cb.end()), RB(rb.begin(), rb.end());
  for (int e = 1; e < 8; ++e) {  // each combination of column bias, row bias, ReLU
    std::vector<float> fused(c0.begin(), c0.end()), separate(c0.begin(), c0.end());
    strata::kernels::cpu::GemmArgs<float> g{ta, tb, m, n, k, 1.0f, A.data(), lda, B.data(), ldb, beta, separate.data(), ldc};
    strata::kernels::cpu::gemm_avx512(g);
    g.col_bias = e & 1 ? CB.data() : nullptr;
    g.row_bias = e & 2 ? RB.data() : nullptr;
    g.relu = (e & 4) != 0;
    strata::kernels::cpu::apply_epilogue(g);
    g.c = fused.data();
    strata::kernels::cpu::gemm_avx512(g);
    INFO("m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " beta=", beta, " epilogue=", e);
    CHECK(fused == separate);  // bit for bit, C's padding included
  }
}

void check_avx512_shape(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha, float beta,
                        GemmFn<float> run) {
  const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
  const auto a = ref::random_vector(static_cast<std::size_t>((ta ? k : m) * lda), 11);
  const auto b = ref::random_vector(static_cast<std::size_t>((tb ? n : k) * ldb), 12);
  const auto c0 = ref::random_vector(static_cast<std::size_t>(m * ldc), 13);
  std::vector<float> A(a.begin(), a.end()), B(b.begin(), b.end()), C(c0.begin(), c0.end());
  if (beta == 0.0f)  // never read: NaN there must not survive
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) C[static_cast<std::size_t>(i * ldc + j)] = NAN;
  strata::kernels::cpu::GemmArgs<float> g{ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc};
  std::vector<float> sums(static_cast<std::size_t>(m), 0.25f);  // op(A)'s row sums (small_gemm takes none)
  const bool with_sums = run == &strata::kernels::cpu::gemm_avx512;
  if (with_sums) g.a_row_sums = sums.data();
  run(g);
  double worst = 0, worst_sum = 0;
  bool pad_kept = true;
  for (std::int64_t i = 0; i < m; ++i) {
    double s = 0.25, scale = 0.25;
    for (std::int64_t p = 0; p < k; ++p) {
      const double x = A[static_cast<std::size_t>(ta ? p * lda + i : i * lda + p)];
      s += x;
      scale += std::abs(x);
    }
    if (with_sums) worst_sum = std::max(worst_sum, std::abs(sums[static_cast<std::size_t>(i)] - s) / scale);
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, scale = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = A[static_cast<std::size_t>(ta ? p * lda + i : i * lda + p)];
        const double y = B[static_cast<std::size_t>(tb ? j * ldb + p : p * ldb + j)];
        s += x * y;
        scale += std::abs(x * y);
      }
      const double old = beta == 0.0f ? 0.0 : c0[static_cast<std::size_t>(i * ldc + j)];
      const double want = alpha * s + beta * old;
      const double got = C[static_cast<std::size_t>(i * ldc + j)];
      worst = std::max(worst, std::abs(got - want) / (std::abs(alpha) * scale + std::abs(beta * old) + 1e-6));
      if (std::isnan(got)) worst = INFINITY;
    }
    for (std::int64_t j = n; j < ldc; ++j)
      pad_kept &= C[static_cast<std::size_t>(i * ldc + j)] == static_cast<float>(c0[static_cast<std::size_t>(i * ldc + j)]);
  }
  INFO("m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " alpha=", alpha, " beta=", beta);
  CHECK(worst < 1e-5);
  CHECK(worst_sum < 1e-5);
  CHECK(pad_kept);
}

/// small_gemm through GemmArgs (alpha 1, beta 0 or 1, B untransposed: its contract).
void small_gemm_as_gemm(const strata::kernels::cpu::GemmArgs<float>& g) {
  REQUIRE((g.alpha == 1.0f && (g.beta == 0.0f || g.beta == 1.0f) && !g.trans_b));
  strata::kernels::cpu::avx512::small_gemm(g.trans_a, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc, g.beta == 1.0f);
}

}  // namespace

TEST_CASE("Kernels.SmallGemm.MatchesFloat64Reference") {
  // Attention's per-head products: every row tile (8 and 4 rows, single rows after them),
  // each band of 16 to 64 columns and its masked tail, bands past 64 columns, op(A) either
  // way, C written or added to, leading dimensions past the widths and C's padding untouched.
  if (!strata::kernels::cpu::has_avx512f()) {
    MESSAGE("this CPU has no AVX-512: the small-product kernel cannot run here");
    return;
  }
  for (bool ta : {false, true})
    for (std::int64_t m : {1, 3, 4, 7, 8, 9, 16, 17})
      for (std::int64_t n : {1, 15, 16, 17, 32, 33, 48, 50, 64, 65, 130})
        for (std::int64_t k : {0, 1, 5, 32, 64})
          for (float beta : {0.0f, 1.0f}) check_avx512_shape(m, n, k, ta, false, 1.0f, beta, &small_gemm_as_gemm);
}

TEST_CASE("Kernels.Gemm.Avx512MatchesFloat64Reference") {
  if (!strata::kernels::cpu::has_avx512f()) {
    MESSAGE("this CPU has no AVX-512: strata's AVX-512 GEMM cannot run here");
    return;
  }
  check_against_reference<float>(&strata::kernels::cpu::gemm_avx512, 1e-4);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    for (std::int64_t m : {1, 11, 12, 13, 25})
      for (std::int64_t n : {1, 15, 16, 17, 31, 32, 33, 70})
        for (std::int64_t k : {1, 255, 256, 257}) {
          check_avx512_shape(m, n, k, ta, tb, 1.0f, 0.0f);
          check_avx512_epilogue(m, n, k, ta, tb, k == 257 ? 1.0f : 0.0f);
        }
    check_avx512_shape(14, 1100, 20, ta, tb, -0.5f, 1.0f);  // past one block of 1024 columns
    check_avx512_shape(40, 40, 600, ta, tb, 1.5f, 0.5f);    // three blocks deep, beta on the first only
    check_avx512_epilogue(14, 1100, 20, ta, tb, 0.0f);
    check_avx512_epilogue(40, 40, 600, ta, tb, 0.5f);
    check_avx512_epilogue(64, 3136, 576, ta, tb, 0.0f);  // a convolution's product, transposed for its few rows
  }
  // k == 0 or alpha == 0: C = beta C, without reading C when beta == 0.
  std::vector<float> C{NAN, 2.0f}, A{1.0f}, B{1.0f};
  strata::kernels::cpu::GemmArgs<float> g{false, false, 1, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.0f, C.data(), 2};
  strata::kernels::cpu::gemm_avx512(g);
  CHECK(C == std::vector<float>{0.0f, 0.0f});
  C = {3.0f, 2.0f};
  g.k = 1;
  g.alpha = 0.0f;
  g.beta = 0.5f;
  g.ldb = 2;
  B = {1.0f, 1.0f};
  g.b = B.data();
  strata::kernels::cpu::gemm_avx512(g);
  CHECK(C == std::vector<float>{1.5f, 1.0f});
}
#endif

#if defined(STRATA_GEMM_AVX512) && STRATA_HAS_BLAS
TEST_CASE("Kernels.GemmKernel.SplitRunsEachProductOnItsKernel") {
  // Split by shape (OpenBLAS runs AVX-512 kernels of its own): a product that reads A by rows
  // gives strata's kernel's bits, one with A transposed OpenBLAS's. The two kernels sum in
  // different orders, so on these shapes their bits differ and each equality names its kernel.
  namespace kc = strata::kernels::cpu;
  if (!kc::gemm_kernel().split()) {
    MESSAGE("gemm kernel ", kc::gemm_kernel().name, ": no split to check");
    return;
  }
  // strata's kernel is single-threaded and gives way to a multi-threaded OpenBLAS.
  struct OneBlasThread {
    int before = openblas_get_num_threads();
    OneBlasThread() { kc::set_blas_threads(1); }
    ~OneBlasThread() { kc::set_blas_threads(before); }
  } one_thread;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const std::int64_t m = 37, n = 45, k = 300, lda = ta ? m : k, ldb = tb ? k : n;
      const auto a = ref::random_vector(static_cast<std::size_t>(m * k), 31);
      const auto b = ref::random_vector(static_cast<std::size_t>(k * n), 32);
      const std::vector<float> A(a.begin(), a.end()), B(b.begin(), b.end());
      std::vector<float> dispatched(static_cast<std::size_t>(m * n)), strata(dispatched), blas(dispatched);
      const auto run = [&](void (*f)(const kc::GemmArgs<float>&), std::vector<float>& c) {
        f(kc::GemmArgs<float>{ta, tb, m, n, k, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, c.data(), n});
      };
      run(&kc::gemm<float>, dispatched);
      run(&kc::gemm_avx512, strata);
      run(&kc::gemm_blas<float>, blas);
      INFO("ta=", ta, " tb=", tb);
      REQUIRE(strata != blas);  // else the check below could not tell them apart
      CHECK(dispatched == (ta ? blas : strata));
    }
}
#endif

TEST_CASE("Kernels.GemmKernel.FollowsTheCpuTheBlasAndStrataGemm") {
  namespace kc = strata::kernels::cpu;
  const kc::GemmKernel& kernel = kc::gemm_kernel();
  CHECK(&kernel == &kc::gemm_kernel());  // chosen once per process
  INFO("name=", kernel.name, " reason=", kernel.reason);
  REQUIRE(!kernel.reason.empty());
  const char* env = std::getenv("STRATA_GEMM");
  const std::string mode = env && *env ? env : "auto";
  const std::string fallback = STRATA_HAS_BLAS ? "openblas" : "builtin";
  if (!kc::has_avx512f()) {
    CHECK(kernel.name == fallback);  // never the AVX-512 kernel on a CPU without AVX-512
  } else if (mode == "strata") {
    CHECK(kernel.name == "strata-avx512");
    CHECK(!kernel.split());
  } else if (mode == "blas") {
    CHECK(kernel.name == fallback);
  } else {
#if STRATA_HAS_BLAS
    // auto: narrower OpenBLAS kernels give way to strata's; beside OpenBLAS's own AVX-512
    // kernels, strata's takes the products that read A by rows and OpenBLAS the transposed ones.
    CHECK(kernel.avx512());
    CHECK(kernel.split() == kc::detail::is_avx512_core(kc::blas_core().used));
    CHECK(kernel.name == (kernel.split() ? "strata-avx512+openblas" : "strata-avx512"));
#else
    CHECK(kernel.avx512());
#endif
  }
  if (mode != "auto" && mode != "strata" && mode != "blas")  // a value it does not know is named
    CHECK(kernel.reason.find("STRATA_GEMM='" + mode + "' is none of auto, strata, blas") != std::string::npos);
  CHECK(kc::detail::is_avx512_core("SkylakeX"));
  CHECK(kc::detail::is_avx512_core("cooperlake"));
  CHECK(!kc::detail::is_avx512_core("Haswell"));
  CHECK(!kc::detail::is_avx512_core("Zen"));
}

#include "doctest.hpp"
#include "support/reference.hpp"

#include <strata/kernels/cpu/gemm.hpp>

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
          for (double beta : {0.0, 1.0, 0.5}) {
            std::vector<T> A(a.begin(), a.end()), B(b.begin(), b.end()), C(c0.begin(), c0.end());
            strata::kernels::cpu::GemmArgs<T> g{ta, tb, m, n, k, T(1.5), A.data(), ta ? m : k, B.data(), tb ? k : n,
                                                static_cast<T>(beta), C.data(), n};
            gemm(g);
            std::vector<double> want(ab.size()), got(C.begin(), C.end());
            for (std::size_t i = 0; i < ab.size(); ++i) want[i] = 1.5 * ab[i] + beta * c0[i];
            INFO("m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " beta=", beta);
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

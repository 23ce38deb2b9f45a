#include "doctest.hpp"
#include "support/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <strata/kernels/cpu/gemm_bf16.hpp>
#include <strata/kernels/cpu/gemm_f16.hpp>
#include <strata/tensor/half.hpp>

namespace {

namespace kc = strata::kernels::cpu;
namespace km = strata::kernels::math;

using Bf16GemmFn = void (*)(const kc::GemmArgs<float>&);

// A 16-bit GEMM and the rounding of its operands it stands for.
struct NamedKernel {
  const char* name;
  Bf16GemmFn run;
  float (*round)(float) = &km::round_to_bf16;
};

// Every bfloat16 GEMM this CPU can run, and the dispatcher.
std::vector<NamedKernel> bf16_kernels() {
  std::vector<NamedKernel> all{{"float32", &kc::gemm_bf16_rounded}, {"dispatch", &kc::gemm_bf16}};
#ifdef STRATA_GEMM_AVX512
  if (kc::has_avx512_bf16()) all.push_back({"avx512-bf16", &kc::gemm_bf16_avx512});
#endif
#ifdef STRATA_GEMM_AMX
  if (kc::runs_amx_bf16()) all.push_back({"amx-bf16", &kc::gemm_bf16_amx});
#endif
  return all;
}

// Every float16 GEMM: the operands rounded one at a time, by F16C where the CPU has it, and
// the dispatcher.
std::vector<NamedKernel> f16_kernels() {
  std::vector<NamedKernel> all{
      {"f16 scalar", [](const kc::GemmArgs<float>& g) { kc::gemm_rounded_operands(g, kc::round_to_f16); }, &km::round_to_f16},
      {"f16 dispatch", &kc::gemm_f16, &km::round_to_f16}};
#ifdef STRATA_GEMM_F16C
  if (kc::has_f16c())
    all.push_back({"f16c", [](const kc::GemmArgs<float>& g) { kc::gemm_rounded_operands(g, kc::round_to_f16_f16c); },
                   &km::round_to_f16});
#endif
  return all;
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Bf16Shape {
  std::int64_t m, n, k;
};

// C = alpha r(op(A)) r(op(B)) + beta C, then the epilogue, r the kernel's rounding to bfloat16
// or float16, against the same in float64 over the rounded operands (exact products): the float32 sums' error, at most about k units
// of float's last place of sum |alpha a b| + |beta c| + |biases|, element by element.
void check_bf16_shape(const NamedKernel& kernel, Bf16Shape s, bool ta, bool tb) {
  const std::int64_t m = s.m, n = s.n, k = s.k;
  const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
  const auto a = ref::random_vector(static_cast<std::size_t>((ta ? k : m) * lda), 31);
  const auto b = ref::random_vector(static_cast<std::size_t>((tb ? n : k) * ldb), 32);
  const auto c0 = ref::random_vector(static_cast<std::size_t>(m * ldc), 33);
  const auto cb = ref::random_vector(static_cast<std::size_t>(n), 34), rb = ref::random_vector(static_cast<std::size_t>(m), 35);
  const std::vector<float> A(a.begin(), a.end()), B(b.begin(), b.end()), CB(cb.begin(), cb.end()), RB(rb.begin(), rb.end());
  const auto at_a = [&](std::int64_t i, std::int64_t p) { return A[static_cast<std::size_t>(ta ? p * lda + i : i * lda + p)]; };
  const auto at_b = [&](std::int64_t p, std::int64_t j) { return B[static_cast<std::size_t>(tb ? j * ldb + p : p * ldb + j)]; };
  std::vector<double> ab(static_cast<std::size_t>(m * n)), mag(ab.size()), sums(static_cast<std::size_t>(m), 0.25);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) {
      const double x = kernel.round(at_a(i, p));
      sums[static_cast<std::size_t>(i)] += at_a(i, p);
      for (std::int64_t j = 0; j < n; ++j) {
        const double y = kernel.round(at_b(p, j));
        ab[static_cast<std::size_t>(i * n + j)] += x * y;
        mag[static_cast<std::size_t>(i * n + j)] += std::abs(x * y);
      }
    }
  const float alpha = 1.5f;
  for (const float beta : {0.0f, 1.0f, 0.5f})
    for (int e = 0; e < 4; ++e) {  // none; column bias; row bias and ReLU; both biases
      std::vector<float> C(c0.begin(), c0.end()), got_sums(static_cast<std::size_t>(m), 0.25f);
      if (beta == 0.0f)  // never read: NaN there must not survive
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) C[static_cast<std::size_t>(i * ldc + j)] = NAN;
      kc::GemmArgs<float> g{ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc};
      g.col_bias = e == 1 || e == 3 ? CB.data() : nullptr;
      g.row_bias = e >= 2 ? RB.data() : nullptr;
      g.relu = e == 2;
      g.a_row_sums = beta == 0.5f ? got_sums.data() : nullptr;
      kernel.run(g);
      INFO(kernel.name, ": m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " beta=", beta, " epilogue=", e);
      double worst = 0;  // the largest error in units of its bound
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          const auto r = static_cast<std::size_t>(i * n + j), o = static_cast<std::size_t>(i * ldc + j);
          double want = alpha * ab[r] + beta * c0[o], scale = alpha * mag[r] + std::abs(beta * c0[o]);
          if (g.col_bias) want += cb[static_cast<std::size_t>(j)], scale += std::abs(cb[static_cast<std::size_t>(j)]);
          if (g.row_bias) want += rb[static_cast<std::size_t>(i)], scale += std::abs(rb[static_cast<std::size_t>(i)]);
          if (g.relu) want = std::max(want, 0.0);
          const double bound = std::ldexp(static_cast<double>(k + 4), -24) * scale + 1e-30;
          worst = std::max(worst, std::abs(C[o] - want) / bound);  // NaN fails below
          if (!(std::abs(C[o] - want) <= bound)) worst = INFINITY;
        }
      CHECK(worst <= 1.0);
      bool untouched = true;  // C's columns past n
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = n; j < ldc; ++j)
          untouched = untouched && C[static_cast<std::size_t>(i * ldc + j)] == static_cast<float>(c0[static_cast<std::size_t>(i * ldc + j)]);
      CHECK(untouched);
      if (g.a_row_sums != nullptr)  // from the float operand, not its rounding
        CHECK(ref::max_rel_diff(std::vector<double>(got_sums.begin(), got_sums.end()), sums) < 1e-5);
    }
}

}  // namespace

TEST_CASE("Kernels.GemmBf16.RoundsToNearestEven") {
  // 1 + 2^-8 lies halfway between bfloat16's 1 and 1 + 2^-7: even is 1. 1 + 3 * 2^-8 lies
  // halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6. A hair above a halfway point rounds up.
  const float tie_down = from_bits(0x3f808000u), tie_up = from_bits(0x3f818000u), above = from_bits(0x3f808001u);
  CHECK(km::bf16_bits(tie_down) == 0x3f80u);
  CHECK(km::bf16_bits(tie_up) == 0x3f82u);
  CHECK(km::bf16_bits(above) == 0x3f81u);
  CHECK(km::bf16_bits(-tie_up) == 0xbf82u);
  CHECK(km::bf16_bits(INFINITY) == 0x7f80u);
  CHECK(std::isnan(km::bf16_float(km::bf16_bits(NAN))));
  CHECK(km::bf16_bits(from_bits(0x7f7fffffu)) == 0x7f80u);  // float's largest rounds past bfloat16's: infinity
  for (const NamedKernel& kernel : bf16_kernels()) {
    INFO(kernel.name);
    // Each value times 1 over a depth of 2 (the kernel's pairs), the other half of the pair 0.
    for (const float x : {tie_down, tie_up, above, -tie_up}) {
      std::vector<float> A{x, 0.0f}, B{1.0f, 5.0f}, C{NAN};
      kernel.run({false, false, 1, 1, 2, 1.0f, A.data(), 2, B.data(), 1, 0.0f, C.data(), 1});
      CHECK(C[0] == km::round_to_bf16(x));
    }
  }
}

TEST_CASE("Kernels.GemmBf16.MatchesFloat64OfRoundedOperands") {
  // The edges of the kernels' blocking: rows around the AVX-512 kernel's 12-row tiles and
  // 192-row blocks and AMX's 16-row tiles, 32-row blocks and 256 rows packed; columns around
  // the 32-column panels and 1024-column blocks; depths odd, around AMX's 32-deep tiles and
  // the 512-deep blocks; wide shapes with few rows take the transposed route where B is read
  // transposed.
  const Bf16Shape shapes[] = {{1, 1, 1},      {13, 33, 7},   {12, 32, 512}, {25, 70, 513},  {200, 40, 300},
                              {5, 1030, 64},  {3, 200, 65},  {30, 1030, 1100}, {1, 17, 2}, {17, 16, 31},
                              {33, 48, 33},   {257, 40, 95}, {48, 47, 1025}};
  for (const NamedKernel& kernel : bf16_kernels())
    for (const Bf16Shape& s : shapes)
      for (int t = 0; t < 4; ++t) check_bf16_shape(kernel, s, (t & 1) != 0, (t & 2) != 0);
}

TEST_CASE("Kernels.GemmF16.RoundsToNearestEven") {
  // float16 keeps 10 fraction bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 (even: 1),
  // 1 + 3 * 2^-11 halfway between 1 + 2^-10 and 1 + 2^-9 (even: the latter). Its largest
  // finite value is 65504; from 65520 (halfway to 65536) on, infinity. Its subnormals are
  // multiples of 2^-24: 2^-25 is halfway between 0 and 2^-24 (even: 0), 3 * 2^-25 halfway
  // between 2^-24 and 2^-23 (even: 2^-23).
  CHECK(km::round_to_f16(1.0f + 0x1p-11f) == 1.0f);
  CHECK(km::round_to_f16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  CHECK(km::round_to_f16(std::nextafter(1.0f + 0x1p-11f, 2.0f)) == 1.0f + 0x1p-10f);
  CHECK(km::round_to_f16(65504.0f) == 65504.0f);
  CHECK(km::round_to_f16(std::nextafter(65520.0f, 0.0f)) == 65504.0f);
  CHECK(km::round_to_f16(65520.0f) == INFINITY);
  CHECK(km::round_to_f16(-1e6f) == -INFINITY);
  CHECK(km::round_to_f16(0x1p-24f) == 0x1p-24f);
  CHECK(km::round_to_f16(0x1p-25f) == 0.0f);
  CHECK(km::round_to_f16(3 * 0x1p-25f) == 0x1p-23f);
  CHECK(km::round_to_f16(0x1p-14f) == 0x1p-14f);  // the smallest normal
  CHECK(std::isnan(km::round_to_f16(NAN)));
  CHECK(km::f16_bits(-2.0f) == 0xc000u);
  CHECK(static_cast<float>(strata::Half(3.0f)) == 3.0f);
#ifdef STRATA_GEMM_F16C
  // F16C's conversions give the scalar conversion's floats, bit for bit, over a sweep of every
  // 4099th float bit pattern (normals, subnormals, both signs, infinities and NaNs).
  if (kc::has_f16c()) {
    std::vector<float> from, got(4096), want(4096);
    std::int64_t differ = 0;
    for (std::uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
      from.push_back(from_bits(static_cast<std::uint32_t>(u)));
      if (from.size() < 4096 && u + 4099 <= 0xffffffffu) continue;
      const auto n = static_cast<std::int64_t>(from.size());
      kc::round_to_f16_f16c(from.data(), got.data(), n);
      kc::round_to_f16(from.data(), want.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint32_t a, b;
        std::memcpy(&a, &got[static_cast<std::size_t>(i)], 4);
        std::memcpy(&b, &want[static_cast<std::size_t>(i)], 4);
        const bool both_nan = std::isnan(got[static_cast<std::size_t>(i)]) && std::isnan(want[static_cast<std::size_t>(i)]);
        differ += a != b && !both_nan;
      }
      from.clear();
    }
    CHECK(differ == 0);
  }
#endif
}

TEST_CASE("Kernels.GemmF16.MatchesFloat64OfRoundedOperands") {
  const Bf16Shape shapes[] = {{1, 1, 1}, {13, 33, 7}, {25, 70, 513}, {5, 1030, 64}, {1, 17, 2}};
  for (const NamedKernel& kernel : f16_kernels())
    for (const Bf16Shape& s : shapes)
      for (int t = 0; t < 4; ++t) check_bf16_shape(kernel, s, (t & 1) != 0, (t & 2) != 0);
}

TEST_CASE("Kernels.GemmF16.OperandsPastItsRangeAreInfinite") {
  // 70000 is past float16's 65504: the operand is infinite, and so is the product, as on a GPU
  // (what a loss scale that is too large shows as); 60001 is within range.
  for (const NamedKernel& kernel : f16_kernels()) {
    INFO(kernel.name);
    std::vector<float> big{70000.0f, 1.0f}, fits{60001.0f, 0.0f}, tiny{0x1p-26f, 0.0f}, ones{1.0f, 1.0f}, c{0.0f};
    kernel.run({false, false, 1, 1, 2, 1.0f, big.data(), 2, ones.data(), 1, 0.0f, c.data(), 1});
    CHECK(c[0] == INFINITY);
    kernel.run({false, false, 1, 1, 2, 1.0f, fits.data(), 2, ones.data(), 1, 0.0f, c.data(), 1});
    CHECK(c[0] == 60000.0f);  // 60001 rounded to float16's multiples of 32 there
    kernel.run({false, false, 1, 1, 2, 1.0f, tiny.data(), 2, ones.data(), 1, 0.0f, c.data(), 1});
    CHECK(c[0] == 0.0f);  // below half of float16's smallest subnormal: gone (what a loss scale prevents)
  }
}

TEST_CASE("Kernels.GemmBf16.EmptyAndDegenerateShapes") {
  for (const NamedKernel& kernel : bf16_kernels()) {
    INFO(kernel.name);
    std::vector<float> A{1, 2, 3}, B{4, 5, 6}, C{7, 8, 9}, sums{0.5f, 0.5f, 0.5f};
    kernel.run({false, false, 3, 1, 0, 1.0f, A.data(), 1, B.data(), 1, 0.0f, C.data(), 1});  // k = 0: C = 0
    CHECK(C == std::vector<float>{0, 0, 0});
    C = {7, 8, 9};
    kernel.run({false, false, 3, 1, 0, 1.0f, A.data(), 1, B.data(), 1, 2.0f, C.data(), 1});  // k = 0: C = beta C
    CHECK(C == std::vector<float>{14, 16, 18});
    kc::GemmArgs<float> g{false, false, 3, 0, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f, C.data(), 1};
    g.a_row_sums = sums.data();
    kernel.run(g);  // n = 0: C untouched, A's row sums still taken
    CHECK(C == std::vector<float>{14, 16, 18});
    CHECK(sums == std::vector<float>{1.5f, 2.5f, 3.5f});
    std::vector<float> nan_a{NAN, 1.0f}, inf_a{INFINITY, 1.0f}, ones{1.0f, 1.0f}, c{0.0f};
    kernel.run({false, false, 1, 1, 2, 1.0f, nan_a.data(), 2, ones.data(), 1, 0.0f, c.data(), 1});
    CHECK(std::isnan(c[0]));
    kernel.run({false, false, 1, 1, 2, 1.0f, inf_a.data(), 2, ones.data(), 1, 0.0f, c.data(), 1});
    CHECK(c[0] == INFINITY);
  }
}

TEST_CASE("Kernels.GemmBf16.KernelFollowsTheCpuFlagsLinuxReports") {
  // /proc/cpuinfo's flags, which Linux lists only for what the CPU has and the kernel supports
  // (amx_bf16 beside amx_tile: the tiles' state enabled), against the kernel chosen from CPUID.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) return;  // no /proc: nothing independent to check against
  std::istringstream words(line);
  bool avx512_bf16 = false, amx_bf16 = false, amx_tile = false;
  for (std::string w; words >> w;) {
    avx512_bf16 |= w == "avx512_bf16";
    amx_bf16 |= w == "amx_bf16";
    amx_tile |= w == "amx_tile";
  }
  const std::string name = kc::bf16_gemm_kernel().name;
  INFO(kc::bf16_gemm_kernel().reason);
#if defined(STRATA_GEMM_AMX)
  if (avx512_bf16 && amx_bf16 && amx_tile) CHECK(name == "amx-bf16");
#endif
#if defined(STRATA_GEMM_AVX512)
  if (avx512_bf16 && !(amx_bf16 && amx_tile)) CHECK(name == "avx512-bf16");
#endif
  if (!avx512_bf16) CHECK(name == "float32");
}

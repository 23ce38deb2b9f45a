// Self-attention's packed-head kernels in float32 (on AVX-512: the 16 x 16 transposes and the
// scores' softmax taken in registers, attention_avx512.hpp) against the same kernels in
// float64, which run the plain products and row softmax; the transposes element by element.
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include <strata/kernels/cpu/attention.hpp>

namespace k = strata::kernels::cpu;

namespace {

std::vector<float> normal_values(std::size_t n, unsigned seed, float sd) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

/// max |got - want| over max(|want|, 1e-3).
template <class A, class B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want) {
  double worst = 0, scale = 1e-3;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return worst / scale;
}

}  // namespace

TEST_CASE("Kernels.Attention.TransposesMatchElementByElement") {
  // Whole 16 x 16 blocks, edges of rows and of columns, a head's stride in a packed projection.
  // (no structured bindings: clang 14 cannot capture them in CAPTURE's lambda)
  for (const auto& shape : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
           {64, 32, 384}, {16, 16, 16}, {17, 16, 48}, {5, 8, 24}, {33, 48, 50}, {128, 20, 60}, {1, 1, 1}, {31, 47, 47}}) {
    const std::int64_t rows = std::get<0>(shape), cols = std::get<1>(shape), ld = std::get<2>(shape);
    CAPTURE(rows);
    CAPTURE(cols);
    const auto src = normal_values(static_cast<std::size_t>(rows * ld), 7, 1.0f);
    std::vector<float> dst(static_cast<std::size_t>(rows * cols), -1.0f);
    k::detail::transpose_into<float>(rows, cols, src.data(), ld, dst.data());
    int wrong = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        wrong += dst[static_cast<std::size_t>(c * rows + r)] != src[static_cast<std::size_t>(r * ld + c)];
    CHECK(wrong == 0);
  }
}

TEST_CASE("Kernels.Attention.Float32FollowsFloat64") {
  // Rows of 1 to 129 keys around the packs of 16 (129: past the fused tiles' 128, the plain
  // path), head widths of a half pack to three packs, causal or not; the backward pass
  // overwriting and adding to what dqkv holds.
  for (const auto& shape : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 8}, {15, 16}, {16, 32}, {17, 16}, {64, 32}, {100, 48}, {128, 32}, {129, 16}})
    for (bool causal : {false, true}) {
      const std::int64_t tokens = shape.first, width = shape.second;
      CAPTURE(tokens);
      CAPTURE(width);
      CAPTURE(causal);
      const k::AttentionShape s{2, tokens, 3, width, causal};
      const std::size_t n_qkv = static_cast<std::size_t>(s.batch * tokens * 3 * s.width()),
                        n_out = static_cast<std::size_t>(s.batch * tokens * s.width()),
                        n_probs = static_cast<std::size_t>(s.batch * s.heads * tokens * tokens);
      const auto qkv = normal_values(n_qkv, 11, 2.0f), dout = normal_values(n_out, 12, 1.0f),
                 before = normal_values(n_qkv, 13, 1.0f);
      auto run = [&]<class T>(T) {
        const std::vector<T> x(qkv.begin(), qkv.end()), g(dout.begin(), dout.end());
        std::vector<T> probs(n_probs), out(n_out), scratch(static_cast<std::size_t>(k::attention_scratch(s)));
        std::vector<T> dqkv(n_qkv), added(before.begin(), before.end());
        const T scale = T(1) / std::sqrt(static_cast<T>(width));
        k::attention_forward<T>(s, x.data(), scale, probs.data(), scratch.data(), out.data());
        k::attention_backward<T>(s, x.data(), probs.data(), g.data(), scale, scratch.data(), dqkv.data(), false);
        k::attention_backward<T>(s, x.data(), probs.data(), g.data(), scale, scratch.data(), added.data(), true);
        return std::tuple{probs, out, dqkv, added};
      };
      const auto [p32, o32, d32, a32] = run(0.0f);
      const auto [p64, o64, d64, a64] = run(0.0);
      CHECK(relative_error(p32, p64) < 4e-6);
      CHECK(relative_error(o32, o64) < 4e-6);
      CHECK(relative_error(d32, d64) < 4e-6);
      CHECK(relative_error(a32, a64) < 4e-6);
      // Masked weights are exactly 0 and each row's weights sum to 1.
      int masked_nonzero = 0;
      double worst_sum = 0;
      for (std::int64_t row = 0; row < s.batch * s.heads * tokens; ++row) {
        const std::int64_t query = row % tokens;
        double sum = 0;
        for (std::int64_t key = 0; key < tokens; ++key) {
          const float w = p32[static_cast<std::size_t>(row * tokens + key)];
          sum += w;
          masked_nonzero += causal && key > query && w != 0.0f;
        }
        worst_sum = std::max(worst_sum, std::abs(sum - 1.0));
      }
      CHECK(masked_nonzero == 0);
      CHECK(worst_sum < 1e-5);
    }
}

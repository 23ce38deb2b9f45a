// The layers of ResNets and Transformers against plain float64 loops written from their
// definitions: batched matmul, softmax, attention, the norms, embedding, pooling, concat;
// their modules' names (PyTorch's), modes and errors.
#include "doctest.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <strata/strata.hpp>

using strata::DType;
using strata::Tensor;
namespace nn = strata::nn;

namespace {

Tensor rand64(const strata::Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  strata::Generator g(seed);
  return strata::uniform(s, lo, hi, g, DType::f64);
}

// Each element within tol of its reference, relative to the larger of 1 and the reference.
void check_close_floor1(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol).scale(1.0));
  }
}

/// Float32 against float64: every output of run(f32) within 2e-5 of run(f64)'s, relative to
/// that output's largest magnitude (at least 1e-3).
template <class Run>
void check_float_near_double(Run&& run) {
  const std::vector<std::vector<double>> want = run(DType::f64), got = run(DType::f32);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    CAPTURE(k);
    REQUIRE(got[k].size() == want[k].size());
    double worst = 0, scale = 1e-3;
    for (double v : want[k]) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < want[k].size(); ++i) worst = std::max(worst, std::abs(got[k][i] - want[k][i]));
    CHECK(worst / scale < 2e-5);
  }
}

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

// Attention from its definition: o[b, i] = Σ_j softmax_j(q_i · k_j / √D) v_j over the visible j.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const auto Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>();
  const std::int64_t B = q.dim(0), Tq = q.dim(1), Tk = k.dim(1), D = q.dim(2), Dv = v.dim(2);
  std::vector<double> out(static_cast<std::size_t>(B * Tq * Dv), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < Tq; ++i) {
      const std::int64_t visible = causal ? i + (Tk - Tq) + 1 : Tk;
      std::vector<double> s(static_cast<std::size_t>(visible));
      double mx = -1e300, total = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += Q[static_cast<std::size_t>((b * Tq + i) * D + d)] * K[static_cast<std::size_t>((b * Tk + j) * D + d)];
        s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
      }
      for (double& e : s) total += (e = std::exp(e - mx));
      for (std::int64_t j = 0; j < visible; ++j)
        for (std::int64_t d = 0; d < Dv; ++d)
          out[static_cast<std::size_t>((b * Tq + i) * Dv + d)] +=
              s[static_cast<std::size_t>(j)] / total * V[static_cast<std::size_t>((b * Tk + j) * Dv + d)];
    }
  return out;
}

}  // namespace

TEST_CASE("Layers.Matmul: batched entries equal one 2-D product each, views read in place") {
  const Tensor a = rand64({3, 4, 5}, 1), b = rand64({3, 6, 5}, 2);
  const Tensor c = strata::matmul(a, strata::transpose(b, 1, 2));  // a transposed view: no copy made
  REQUIRE(c.shape() == strata::Shape{3, 4, 6});
  const auto A = a.to_vector<double>(), Bv = b.to_vector<double>(), C = c.to_vector<double>();
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) {
        double want = 0;
        for (int k = 0; k < 5; ++k) want += A[static_cast<std::size_t>((n * 4 + i) * 5 + k)] * Bv[static_cast<std::size_t>((n * 6 + j) * 5 + k)];
        CHECK(C[static_cast<std::size_t>((n * 4 + i) * 6 + j)] == doctest::Approx(want).epsilon(1e-12));
      }
  CHECK_THROWS_WITH_AS(strata::matmul(rand64({2, 3, 4}, 3), rand64({3, 4, 2}, 4)), doctest::Contains("batch axes differ"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::matmul(rand64({2, 3, 4}, 3), rand64({2, 3, 2}, 4)), doctest::Contains("inner extents"),
                       strata::invalid_argument);
}

TEST_CASE("Layers.Softmax: rows sum to one, the causal mask is exact, any axis") {
  const Tensor x = rand64({2, 3, 4}, 5, -20, 20);
  const auto y = strata::softmax(x).to_vector<double>(), xs = x.to_vector<double>();
  for (int r = 0; r < 6; ++r) {
    double mx = -1e300, total = 0;
    for (int c = 0; c < 4; ++c) mx = std::max(mx, xs[static_cast<std::size_t>(r * 4 + c)]);
    for (int c = 0; c < 4; ++c) total += std::exp(xs[static_cast<std::size_t>(r * 4 + c)] - mx);
    for (int c = 0; c < 4; ++c)
      CHECK(y[static_cast<std::size_t>(r * 4 + c)] ==
            doctest::Approx(std::exp(xs[static_cast<std::size_t>(r * 4 + c)] - mx) / total).epsilon(1e-12));
  }
  const auto y0 = strata::softmax(x, 0).to_vector<double>();
  for (int j = 0; j < 12; ++j) CHECK(y0[static_cast<std::size_t>(j)] + y0[static_cast<std::size_t>(12 + j)] == doctest::Approx(1.0));
  const auto causal = strata::ops::detail::scaled_softmax(rand64({3, 3}, 6), 1.0, 3).to_vector<double>();
  CHECK(causal[0] == 1.0);
  CHECK(causal[1] == 0.0);
  CHECK(causal[2] == 0.0);
  CHECK(causal[5] == 0.0);
  CHECK(causal[3] + causal[4] == doctest::Approx(1.0));
}

TEST_CASE("Layers.Attention: equals its definition, causal or not, with fewer queries than keys") {
  for (bool causal : {false, true}) {
    const Tensor q = rand64({2, 5, 4}, 7), k = rand64({2, 5, 4}, 8), v = rand64({2, 5, 3}, 9);
    check_close_floor1(strata::scaled_dot_product_attention(q, k, v, causal).to_vector<double>(),
                naive_attention(q, k, v, causal));
  }
  const Tensor q = rand64({1, 2, 4}, 10), k = rand64({1, 5, 4}, 11), v = rand64({1, 5, 2}, 12);
  check_close_floor1(strata::scaled_dot_product_attention(q, k, v, true).to_vector<double>(), naive_attention(q, k, v, true));
  CHECK_THROWS_WITH_AS(strata::scaled_dot_product_attention(q, rand64({1, 5, 3}, 1), v), doctest::Contains("do not fit"),
                       strata::invalid_argument);
}

TEST_CASE("Layers.MultiheadAttention: heads split, attended and merged as their definition says") {
  strata::manual_seed(13);
  nn::MultiheadAttention mha(6, 2, true, true, strata::default_generator(), DType::f64);
  CHECK(names(mha.named_parameters()) ==
        std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  {  // a non-zero input bias, so that its use is checked too
    Tensor b = mha.parameters()[1];
    b.copy_(rand64({18}, 14));
  }
  const Tensor x = rand64({2, 4, 6}, 15);
  const Tensor y = mha(x);
  REQUIRE(y.shape() == strata::Shape{2, 4, 6});
  // Reference: project, take each head's columns, attend naively, concatenate, project out.
  const auto& p = mha.parameters();
  const Tensor qkv = strata::linear(x, p[0], p[1]);
  std::vector<double> merged(2 * 4 * 6);
  for (int h = 0; h < 2; ++h) {
    const auto head = [&](int part) { return strata::slice(qkv, -1, part * 6 + h * 3, part * 6 + h * 3 + 3); };
    const auto o = naive_attention(head(0), head(1), head(2), true);
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 4; ++t)
        for (int d = 0; d < 3; ++d)
          merged[static_cast<std::size_t>((b * 4 + t) * 6 + h * 3 + d)] = o[static_cast<std::size_t>((b * 4 + t) * 3 + d)];
  }
  const Tensor want = strata::linear(strata::from_vector<double>({2, 4, 6}, merged, DType::f64), p[2], p[3]);
  check_close_floor1(y.to_vector<double>(), want.to_vector<double>());
  // Separate query, key and value equal self-attention when all three are x.
  check_close_floor1(mha.forward(x, x, x).to_vector<double>(), y.to_vector<double>());
  CHECK_THROWS_WITH_AS(mha(rand64({2, 4, 5}, 1)), doctest::Contains("must be [B, T, 6]"), strata::invalid_argument);
}

TEST_CASE("Layers.SelfAttention: packed heads in one operation equal the heads attended one by one") {
  // The reference: each head's q, k and v sliced out of the projection and made contiguous,
  // scaled_dot_product_attention on them, the outputs concatenated; values and the gradients
  // of a weighted sum, in float64 (to 1e-12) and in float32 (to float rounding). 37 tokens
  // span three causal blocks and part of a fourth.
  const std::int64_t B = 2, Tn = 37, H = 3, D = 5, W = H * D;
  for (DType dtype : {DType::f64, DType::f32})
    for (bool causal : {false, true}) {
      const Tensor qkv0 = strata::to_dtype(rand64({B, Tn, 3 * W}, causal ? 21 : 22), dtype);
      const Tensor weights = strata::to_dtype(rand64({B, Tn, W}, 23), dtype);
      Tensor fused_in = qkv0.clone().requires_grad_(), ref_in = qkv0.clone().requires_grad_();
      // (each forward pass followed by its own backward: a backward pass consumes the tape)
      const Tensor fused = strata::ops::detail::self_attention(fused_in, H, causal);
      const std::vector<Tensor> fused_params{fused_in}, ref_params{ref_in};
      const auto gf = strata::grad(strata::sum(fused * weights), fused_params);
      std::vector<Tensor> heads;
      for (std::int64_t h = 0; h < H; ++h) {
        const auto part = [&](std::int64_t k) { return strata::slice(ref_in, -1, k * W + h * D, k * W + (h + 1) * D).contiguous(); };
        heads.push_back(strata::scaled_dot_product_attention(part(0), part(1), part(2), causal));
      }
      const Tensor ref = strata::concat(heads, -1);
      const auto gr = strata::grad(strata::sum(ref * weights), ref_params);
      INFO("dtype=", dtype, " causal=", causal);
      const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
      check_close_floor1(fused.to_vector<double>(), ref.to_vector<double>(), tol);
      check_close_floor1(gf[0].template to_vector<double>(), gr[0].template to_vector<double>(), tol);
    }
  CHECK_THROWS_WITH_AS(strata::ops::detail::self_attention(rand64({1, 4, 10}, 1), 2, true),
                       doctest::Contains("not 3 x 2 heads"), strata::invalid_argument);
}

TEST_CASE("Layers.LayerNorm: mean 0, variance 1 per row, then scale and shift") {
  nn::LayerNorm ln(5, 1e-5, true, DType::f64);
  CHECK(names(ln.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  Tensor w = ln.parameters()[0], b = ln.parameters()[1];
  w.copy_(rand64({5}, 16, 0.5, 2));
  b.copy_(rand64({5}, 17));
  const Tensor x = rand64({3, 5}, 18, -4, 4);
  const auto xs = x.to_vector<double>(), ws = w.to_vector<double>(), bs = b.to_vector<double>();
  std::vector<double> want;
  for (int r = 0; r < 3; ++r) {
    double m = 0, var = 0;
    for (int c = 0; c < 5; ++c) m += xs[static_cast<std::size_t>(r * 5 + c)] / 5;
    for (int c = 0; c < 5; ++c) var += std::pow(xs[static_cast<std::size_t>(r * 5 + c)] - m, 2) / 5;
    for (int c = 0; c < 5; ++c)
      want.push_back((xs[static_cast<std::size_t>(r * 5 + c)] - m) / std::sqrt(var + 1e-5) * ws[static_cast<std::size_t>(c)] + bs[static_cast<std::size_t>(c)]);
  }
  check_close_floor1(ln(x).to_vector<double>(), want, 1e-10);
  CHECK_THROWS_WITH_AS(ln(rand64({3, 4}, 1)), doctest::Contains("must be [4]"), strata::invalid_argument);
}

TEST_CASE("Layers.Float32RowKernels: layer norm, log-softmax, softmax, GELU and self-attention in float32 follow float64") {
  // The float kernels (16-lane row sums, the AVX-512 loops where the CPU has them, masked last
  // packs) against the same ops in float64: values and the gradients of a weighted sum, rows
  // of every width around the packs of 16 and past the 256 exponentials log-softmax's backward
  // takes at a time, its input's gradient added to by a second path (the accumulating pass);
  // a scaled softmax under a causal mask whose rows see 1 to `cols` entries; GELU.
  for (std::int64_t cols : {1, 5, 16, 17, 37, 128, 300}) {
    CAPTURE(cols);
    const Tensor x64 = rand64({7, cols}, 31, -4, 4), w64 = rand64({cols}, 32, 0.5, 2), b64 = rand64({cols}, 33);
    const Tensor weights64 = rand64({7, cols}, 34);
    auto run = [&](DType t) {
      const std::vector<Tensor> params{strata::to_dtype(x64, t).requires_grad_(), strata::to_dtype(w64, t).requires_grad_(),
                                       strata::to_dtype(b64, t).requires_grad_()};
      const Tensor weights = strata::to_dtype(weights64, t);
      const Tensor ln = strata::layer_norm(params[0], params[1], params[2]);
      const Tensor ls = strata::log_softmax(params[0]);
      const Tensor sm = strata::ops::detail::scaled_softmax(params[0], 0.7, cols);
      const Tensor ge = strata::gelu(params[0]);  // its backward reads Φ back from these values
      const Tensor loss = strata::sum(ln * weights) + strata::sum(ls * weights) + strata::sum(params[0] * weights) +
                          strata::sum(sm * weights) + strata::sum(ge * weights);
      const auto g = strata::grad(loss, params);
      std::vector<std::vector<double>> out{ln.to_vector<double>(), ls.to_vector<double>(), sm.to_vector<double>(),
                                           ge.to_vector<double>()};
      for (std::size_t i = 0; i < 3; ++i) out.push_back(g[i].to_vector<double>());
      return out;
    };
    check_float_near_double(run);
  }
  // Self-attention's packed heads (its softmax rows in one call per head, the masked entries
  // of the scores and their gradients never read): 1 token, a block and a part, 4 whole blocks.
  for (std::int64_t tokens : {1, 17, 64})
    for (bool causal : {false, true}) {
      CAPTURE(tokens);
      CAPTURE(causal);
      const std::int64_t H = 2, W = 2 * 8;
      const Tensor qkv64 = rand64({2, tokens, 3 * W}, 35, -2, 2), weights64 = rand64({2, tokens, W}, 36);
      auto run = [&](DType t) {
        const std::vector<Tensor> params{strata::to_dtype(qkv64, t).requires_grad_()};
        const Tensor out = strata::ops::detail::self_attention(params[0], H, causal);
        const auto g = strata::grad(strata::sum(out * strata::to_dtype(weights64, t)), params);
        return std::vector<std::vector<double>>{out.to_vector<double>(), g[0].to_vector<double>()};
      };
      check_float_near_double(run);
    }
}

TEST_CASE("Layers.BasicBlock: its forward pass, gradients and running statistics are the block's definition") {
  // relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)) written out in plain ops on the
  // block's own parameters, float64: the output, the gradients of x and of every parameter,
  // and every running statistic after the step, for a block with an identity shortcut and
  // one with a downsampling 1x1 convolution.
  for (const auto& shape : std::vector<std::array<std::int64_t, 3>>{{4, 4, 1}, {3, 6, 2}}) {
    const std::int64_t cin = shape[0], cout = shape[1], stride = shape[2];  // (no bindings: CAPTURE is a lambda)
    CAPTURE(stride);
    strata::Generator gen(7);
    nn::BasicBlock block(cin, cout, stride, strata::BatchStatistics::per_replica, gen, DType::f64);
    const Tensor x = rand64({3, cin, 7, 7}, 90).requires_grad_(), weights = rand64({3, cout, (6 + stride) / stride, (6 + stride) / stride}, 91);
    std::map<std::string, Tensor> p, running;
    for (const auto& [name, t] : block.named_parameters()) p[name] = t;
    for (const auto& [name, t] : block.named_buffers())
      if (name.find("num_batches") == std::string::npos) running[name] = strata::to_dtype(t, DType::f64).clone();
    auto bn = [&](const Tensor& h, const std::string& at) {
      return strata::batch_norm(h, p[at + ".weight"], p[at + ".bias"], running[at + ".running_mean"],
                                running[at + ".running_var"], true);
    };
    std::vector<Tensor> params{x};
    for (const auto& [name, t] : block.named_parameters()) params.push_back(t);
    const Tensor h = strata::relu(bn(strata::conv2d(x, p["conv1.weight"], {}, stride, 1), "bn1"));
    const Tensor shortcut = stride == 1 ? x : bn(strata::conv2d(x, p["downsample.0.weight"], {}, stride, 0), "downsample.1");
    const Tensor want = strata::relu(strata::add(bn(strata::conv2d(h, p["conv2.weight"], {}, 1, 1), "bn2"), shortcut));
    const auto want_grads = strata::grad(strata::sum(want * weights), params);
    const Tensor got = block(x);
    check_close_floor1(got.to_vector<double>(), want.to_vector<double>());
    const auto got_grads = strata::grad(strata::sum(got * weights), params);
    REQUIRE(got_grads.size() == want_grads.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      check_close_floor1(got_grads[i].to_vector<double>(), want_grads[i].to_vector<double>());
    }
    for (const auto& buffer : block.named_buffers()) {
      const std::string& name = buffer.first;
      CAPTURE(name);
      if (name.find("num_batches") == std::string::npos)
        check_close_floor1(buffer.second.to_vector<double>(), running[name].to_vector<double>());
    }
  }
}

TEST_CASE("Layers.Float32BatchNorm: the fused ReLU and shortcut, forward and backward, in float32 follow float64") {
  // Planes of 1 to 196 pixels (whole packs of 16, a masked last one, none whole): the
  // moments, the gradient sums with the ReLU's mask and the input gradient's pass, against
  // the same ops in float64; the values of a weighted sum's gradients for x, weight, bias and
  // the shortcut.
  for (const auto& hw : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {1, 7}, {4, 4}, {1, 17}, {7, 7}, {14, 14}}) {
    CAPTURE(hw.first * hw.second);
    const strata::Shape shape{3, 5, hw.first, hw.second};
    const Tensor x64 = rand64(shape, 81, -2, 3), r64 = rand64(shape, 82), weights64 = rand64(shape, 83);
    const Tensor w64 = rand64({5}, 84, 0.5, 2), b64 = rand64({5}, 85);
    auto run = [&](DType t) {
      const std::vector<Tensor> params{strata::to_dtype(x64, t).requires_grad_(), strata::to_dtype(w64, t).requires_grad_(),
                                       strata::to_dtype(b64, t).requires_grad_(), strata::to_dtype(r64, t).requires_grad_()};
      const Tensor y = strata::batch_norm(params[0], params[1], params[2], strata::zeros({5}, t), strata::ones({5}, t), true,
                                          0.1, 1e-5, strata::BatchStatistics::per_replica, strata::Activation::relu,
                                          params[3]);
      const auto g = strata::grad(strata::sum(y * strata::to_dtype(weights64, t)), params);
      std::vector<std::vector<double>> out{y.to_vector<double>()};
      for (std::size_t i = 0; i < params.size(); ++i) out.push_back(g[i].to_vector<double>());
      return out;
    };
    check_float_near_double(run);
  }
}

TEST_CASE("Layers.BatchNorm: batch statistics in training, running statistics after, PyTorch's names") {
  nn::BatchNorm2d bn(2, 1e-5, 0.1, true, strata::BatchStatistics::per_replica, DType::f64);
  CHECK(names(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(bn.named_buffers()) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  const Tensor x = rand64({3, 2, 2, 2}, 19, -2, 3);
  const auto xs = x.to_vector<double>();
  const auto y = bn(x).to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    double m = 0, var = 0;
    std::vector<std::size_t> at;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) at.push_back(static_cast<std::size_t>((n * 2 + c) * 4 + i));
    for (auto i : at) m += xs[i] / 12;
    for (auto i : at) var += std::pow(xs[i] - m, 2) / 12;
    for (auto i : at) CHECK(y[i] == doctest::Approx((xs[i] - m) / std::sqrt(var + 1e-5)).epsilon(1e-10));
    CHECK(bn.running_mean().to_vector<double>()[static_cast<std::size_t>(c)] == doctest::Approx(0.1 * m).epsilon(1e-12));
    CHECK(bn.running_var().to_vector<double>()[static_cast<std::size_t>(c)] ==
          doctest::Approx(0.9 + 0.1 * var * 12 / 11).epsilon(1e-12));  // unbiased, as PyTorch
  }
  CHECK(bn.num_batches_tracked() == 1);
  bn.eval();  // the running statistics normalise now, and stay as they are
  const auto rm = bn.running_mean().to_vector<double>(), rv = bn.running_var().to_vector<double>();
  const auto ye = bn(x).to_vector<double>();
  CHECK(ye[0] == doctest::Approx((xs[0] - rm[0]) / std::sqrt(rv[0] + 1e-5)).epsilon(1e-12));
  CHECK(bn.running_mean().to_vector<double>() == rm);
  CHECK(bn.num_batches_tracked() == 1);
  bn.train();
  CHECK_THROWS_WITH_AS(bn(rand64({1, 2, 1, 1}, 1)), doctest::Contains("more than one value per channel"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(bn(rand64({3, 2}, 1)), doctest::Contains("BatchNorm2d needs x [N, C, H, W]"),
                       strata::invalid_argument);
  nn::BatchNorm1d bn1(2);
  CHECK_NOTHROW(bn1(strata::uniform({4, 2}, -1, 1, strata::default_generator())));
}

TEST_CASE("Layers.SyncBatchNorm: outside a strategy it is BatchNorm over the batch it sees") {
  nn::SyncBatchNorm sync(3, 1e-5, 0.1, true, DType::f64);
  nn::BatchNorm1d local(3, 1e-5, 0.1, true, strata::BatchStatistics::per_replica, DType::f64);
  const Tensor x = rand64({5, 3}, 20);
  check_close_floor1(sync(x).to_vector<double>(), local(x).to_vector<double>());
  check_close_floor1(sync.running_var().to_vector<double>(), local.running_var().to_vector<double>());
}

TEST_CASE("Layers.Embedding: rows by index, repeats allowed, a bad index named") {
  strata::manual_seed(21);
  nn::Embedding emb(4, 3, strata::default_generator(), DType::f64);
  const auto w = emb.weight().to_vector<double>();
  const Tensor idx = strata::from_vector<std::int32_t>({2, 2}, {3, 0, 3, 2});
  const Tensor y = emb(idx);
  REQUIRE(y.shape() == strata::Shape{2, 2, 3});
  const auto ys = y.to_vector<double>();
  const int rows[] = {3, 0, 3, 2};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) CHECK(ys[static_cast<std::size_t>(r * 3 + c)] == w[static_cast<std::size_t>(rows[r] * 3 + c)]);
  CHECK_THROWS_WITH_AS(emb(strata::from_vector<std::int64_t>({3}, {1, 4, 0})),
                       doctest::Contains("index 4 at position 1 is out of range for a table of 4 rows"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(emb(strata::zeros({2})), doctest::Contains("indices must be int32 or int64"), strata::invalid_argument);
}

TEST_CASE("Layers.Pooling: window means with padding counted; the global mean of each plane") {
  const Tensor x = rand64({1, 1, 3, 3}, 22);
  const auto xs = x.to_vector<double>();
  const auto y = strata::avg_pool2d(x, 2, 1, 0).to_vector<double>();
  REQUIRE(y.size() == 4);
  CHECK(y[0] == doctest::Approx((xs[0] + xs[1] + xs[3] + xs[4]) / 4));
  CHECK(y[3] == doctest::Approx((xs[4] + xs[5] + xs[7] + xs[8]) / 4));
  const auto padded = strata::avg_pool2d(x, 2, 2, 1).to_vector<double>();  // corner window holds one element
  CHECK(padded[0] == doctest::Approx(xs[0] / 4));
  double total = 0;
  for (double v : xs) total += v;
  CHECK(strata::global_avg_pool2d(x).item() == doctest::Approx(total / 9));
  nn::GlobalAvgPool2d gap;
  CHECK(gap(rand64({2, 3, 4, 4}, 1)).shape() == strata::Shape{2, 3});
}

TEST_CASE("Layers.ConcatSplit: split undoes concat; mismatched shapes are named") {
  const Tensor a = rand64({2, 3}, 23), b = rand64({2, 1}, 24);
  const Tensor c = strata::concat({a, b}, 1);
  REQUIRE(c.shape() == strata::Shape{2, 4});
  const auto parts = strata::split(c, {3, 1}, 1);
  CHECK(parts[0].to_vector<double>() == a.to_vector<double>());
  CHECK(parts[1].to_vector<double>() == b.to_vector<double>());
  CHECK_THROWS_WITH_AS(strata::concat({a, rand64({3, 1}, 1)}, 1), doctest::Contains("tensor 1 has shape"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::split(c, {3, 2}, 1), doctest::Contains("parts add up to 5"), strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::slice(c, 1, 2, 5), doctest::Contains("out of range"), strata::invalid_argument);
}

TEST_CASE("Layers.Gelu: the exact form") {
  const auto y = strata::gelu(strata::from_vector<double>({3}, {-1.0, 0.0, 1.0}, DType::f64)).to_vector<double>();
  CHECK(y[0] == doctest::Approx(-0.15865525393145707).epsilon(1e-14));
  CHECK(y[1] == 0.0);
  CHECK(y[2] == doctest::Approx(0.8413447460685429).epsilon(1e-14));
}

TEST_CASE("Layers.BasicBlock: torchvision's names, a shortcut when the shape changes, buffers in the weights file") {
  nn::BasicBlock same(4, 4, 1), down(4, 8, 2);
  CHECK(names(same.named_parameters()) ==
        std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight", "bn2.bias"});
  const auto dn = names(down.named_parameters());
  CHECK(dn.back() == "downsample.1.bias");
  CHECK(names(down.named_buffers()).back() == "downsample.1.num_batches_tracked");
  const Tensor x = strata::uniform({2, 4, 6, 6}, -1, 1, strata::default_generator());
  CHECK(same(x).shape() == strata::Shape{2, 4, 6, 6});
  CHECK(down(x).shape() == strata::Shape{2, 8, 3, 3});
  // The running statistics travel with the weights: a fresh block in evaluation mode computes
  // what the trained one does.
  const auto path = std::filesystem::temp_directory_path() / "strata_basic_block.weights";
  strata::save_weights(down, path);
  nn::BasicBlock fresh(4, 8, 2);
  strata::load_weights(fresh, path);
  std::filesystem::remove(path);
  down.eval();
  fresh.eval();
  CHECK(fresh(x).to_vector<float>() == down(x).to_vector<float>());
  CHECK(fresh.buffers()[0].to_vector<float>() == down.buffers()[0].to_vector<float>());
}

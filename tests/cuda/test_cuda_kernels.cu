// Every CUDA kernel against the CPU kernel it mirrors, on the same inputs: exact where both
// run the same float operations in the same order (elementwise, pooling), within rounding
// where the order differs (reductions, GEMM, convolution).
#include "doctest.hpp"

#include <cmath>

#include "cuda_test_support.hpp"

#include <strata/kernels/cuda/blas.hpp>
#include <strata/kernels/cuda/elementwise.cuh>
#include <strata/kernels/cuda/optim_step.cuh>
#include <strata/kernels/cuda/pool.cuh>
#include <strata/kernels/cuda/reduce.cuh>
#include <strata/kernels/cuda/softmax.cuh>
#if STRATA_HAS_CUDNN
#include <strata/kernels/cuda/conv_cudnn.hpp>
#endif

using namespace strata;
using namespace cuda_test;
namespace kc = strata::kernels::cuda;
namespace kcpu = strata::kernels::cpu;
namespace km = strata::kernels::math;

namespace {

template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, double rel, double abs = 0) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (!(std::abs(g - w) <= abs + rel * std::abs(w))) {
      FAIL_CHECK("element " << i << ": got " << g << ", want " << w);
      return;
    }
  }
}

}  // namespace

TEST_CASE("binary arithmetic: same shape and broadcast") {
  for (auto kind : {km::BinaryKind::add, km::BinaryKind::sub, km::BinaryKind::mul, km::BinaryKind::div}) {
    const auto a = random_vector<float>(12 * 7, 10), b = random_vector<float>(12 * 7, 11, 0.5, 2);
    Tensor da = upload(a, {12, 7}), db = upload(b, {12, 7}), out = Tensor::empty({12, 7}, DType::f32, kDev);
    kc::binary(kind, 84, da.device_data<float>(), db.device_data<float>(), out.device_data<float>(), stream());
    std::vector<float> want(84);
    for (std::size_t i = 0; i < 84; ++i) want[i] = km::binary(kind, a[i], b[i]);
    CHECK(download<float>(out) == want);
    // [12, 7] (kind) [7]: the row vector broadcast along axis 0.
    const auto r = random_vector<float>(7, 12, 0.5, 2);
    Tensor dr = upload(r, {7});
    const auto ix = kc::strided_index(Shape{12, 7}.dims(), Shape{7, 1}.dims(), Shape{7, 1}.dims(), Shape{0, 1}.dims());
    kc::binary_broadcast(kind, da.device_data<float>(), dr.device_data<float>(), out.device_data<float>(), ix, 84,
                         stream());
    for (std::size_t i = 0; i < 84; ++i) want[i] = km::binary(kind, a[i], r[i % 7]);
    CHECK(download<float>(out) == want);
  }
}

TEST_CASE("unary functions and their backward match the CPU formulas") {
  const auto x = random_vector<float>(500, 20, 0.1, 2);  // positive: log and pow are defined
  const auto g = random_vector<float>(500, 21);
  Tensor dx = upload(x, {500}), dg = upload(g, {500});
  for (std::int64_t k = km::Unary::neg; k <= km::Unary::pow_scalar; ++k) {
    CAPTURE(k);
    const float s = 1.5f;
    Tensor y = Tensor::empty({500}, DType::f32, kDev), d = Tensor::empty({500}, DType::f32, kDev);
    kc::unary(k, 500, dx.device_data<float>(), s, y.device_data<float>(), stream());
    kc::unary_backward(k, 500, dg.device_data<float>(), dx.device_data<float>(), y.device_data<float>(), s,
                       d.device_data<float>(), false, stream());
    // Forward: the device's libm (CUDA's tanhf ~2 ulp, powf 4 ulp) may differ from the host's
    // by a few ulp: 8 ulp of float32 allowed. Backward: from the device's own y, in double, so
    // a last-bit difference in y is not magnified by 1 - y*y (tanh near 2: 15-26x).
    const std::vector<float> dy = download<float>(y);
    std::vector<float> wy(500);
    std::vector<double> wd(500);
    for (std::size_t i = 0; i < 500; ++i) {
      wy[i] = km::unary_fwd<float>(k, x[i], s);
      wd[i] = double(g[i]) * km::unary_dydx<double>(k, double(x[i]), double(dy[i]), double(s));
    }
    check_close(dy, wy, 8 * 0x1p-23);
    const std::vector<float> got = download<float>(d);
    check_close(std::vector<double>(got.begin(), got.end()), wd, 1e-6, 1e-12);
  }
}

TEST_CASE("bias + relu over rows") {
  const auto x = random_vector<float>(33 * 10, 30), b = random_vector<float>(10, 31);
  Tensor dx = upload(x, {33, 10}), db = upload(b, {10}), out = Tensor::empty({33, 10}, DType::f32, kDev);
  kc::bias_act_rows(33, 10, dx.device_data<float>(), db.device_data<float>(), true, out.device_data<float>(), stream());
  std::vector<float> want(330);
  kcpu::bias_act_rows<float>(33, 10, x.data(), 10, b.data(), true, want.data(), 10);
  CHECK(download<float>(out) == want);
}

TEST_CASE("sum and column sums, against float64 sums") {
  for (std::int64_t n : {1, 255, 256, 257, 100000, 3000000}) {
    CAPTURE(n);
    const auto x = random_vector<float>(static_cast<std::size_t>(n), 40);
    Tensor dx = upload(x, {n}), out = Tensor::empty({1}, DType::f32, kDev);
    kc::sum(0, n, dx.device_data<float>(), out.device_data<float>(), 0.5, false, stream());
    double want = 0;
    for (float v : x) want += v;
    CHECK(out.item() == doctest::Approx(0.5 * want).epsilon(1e-6));
  }
  const auto m = random_vector<double>(129 * 10, 41);
  Tensor dm = upload(m, {129, 10}), cols = Tensor::empty({10}, DType::f64, kDev);
  kc::sum_columns(129, 10, dm.device_data<double>(), cols.device_data<double>(), false, stream());
  std::vector<double> want(10, 0.0);
  for (std::size_t r = 0; r < 129; ++r)
    for (std::size_t c = 0; c < 10; ++c) want[c] += m[r * 10 + c];
  check_close(download<double>(cols), want, 1e-12);
}

TEST_CASE("fused softmax + cross-entropy, forward and backward, padding rows included") {
  const std::int64_t rows = 37, cols = 10;
  const auto x = random_vector<float>(rows * cols, 50, -5, 5);
  std::vector<std::int32_t> label(rows);
  for (std::int64_t r = 0; r < rows; ++r) label[static_cast<std::size_t>(r)] = static_cast<std::int32_t>((r * 3) % cols);
  label[5] = -1;  // a padding row
  Tensor dx = upload(x, {rows, cols}), dl = upload(label, {rows});
  Tensor prob = Tensor::empty({rows, cols}, DType::f32, kDev), row_loss = Tensor::empty({rows}, DType::f32, kDev);
  Tensor loss = Tensor::empty({1}, DType::f32, kDev), grad = Tensor::empty({rows, cols}, DType::f32, kDev);
  const double scale = 1.0 / 36;
  kc::softmax_xent_forward(0, rows, cols, dx.device_data<float>(), dl.device_data<std::int32_t>(),
                           prob.device_data<float>(), row_loss.device_data<float>(), loss.device_data<float>(), scale,
                           stream());
  kc::softmax_xent_backward(rows, cols, prob.device_data<float>(), dl.device_data<std::int32_t>(),
                            static_cast<float>(scale), grad.device_data<float>(), false, stream());
  std::vector<float> wprob(rows * cols), wgrad(rows * cols);
  const double total = kcpu::softmax_xent_forward<float>(rows, cols, x.data(), label.data(), wprob.data());
  kcpu::softmax_xent_backward<float>(rows, cols, wprob.data(), label.data(), static_cast<float>(scale), wgrad.data(),
                                     false);
  CHECK(loss.item() == doctest::Approx(scale * total).epsilon(1e-5));
  check_close(download<float>(prob), wprob, 1e-5, 1e-7);
  check_close(download<float>(grad), wgrad, 1e-5, 1e-8);
}

TEST_CASE("SGD (every variant) and Adam/AdamW steps equal the CPU's") {
  const std::size_t n = 10000;
  const auto g = random_vector<float>(n, 60);
  auto run_sgd = [&](kcpu::SgdParams o) {
    auto p = random_vector<float>(n, 61), buf = random_vector<float>(n, 62);
    Tensor dp = upload(p, {std::int64_t(n)}), dg = upload(g, {std::int64_t(n)}), db = upload(buf, {std::int64_t(n)});
    kc::sgd_step<float>(n, dp.device_data<float>(), dg.device_data<float>(), db.device_data<float>(), o, stream());
    kcpu::sgd_step<float>(n, p.data(), g.data(), buf.data(), o);
    check_close(download<float>(dp), p, 1e-6, 1e-7);  // FMA contraction on the device may round differently
    if (o.momentum != 0) check_close(download<float>(db), buf, 1e-6, 1e-7);
  };
  run_sgd({.lr = 0.1});
  run_sgd({.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .first_step = true});
  run_sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-4, .first_step = false});
  run_sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true, .first_step = false});
  for (bool decoupled : {false, true}) {
    kcpu::AdamParams o{.lr = 1e-3, .weight_decay = 0.01, .decoupled = decoupled, .step = 7};
    auto p = random_vector<float>(n, 63), m = random_vector<float>(n, 64), v = random_vector<float>(n, 65, 0, 1);
    Tensor dp = upload(p, {std::int64_t(n)}), dg = upload(g, {std::int64_t(n)});
    Tensor dm = upload(m, {std::int64_t(n)}), dv = upload(v, {std::int64_t(n)});
    kc::adam_step<float>(n, dp.device_data<float>(), dg.device_data<float>(), dm.device_data<float>(),
                         dv.device_data<float>(), o, stream());
    kcpu::adam_step<float>(n, p.data(), g.data(), m.data(), v.data(), o);
    check_close(download<float>(dp), p, 1e-6, 1e-7);
    check_close(download<float>(dm), m, 1e-6, 1e-7);
    check_close(download<float>(dv), v, 1e-6, 1e-7);
  }
}

TEST_CASE("max pooling forward and backward, with overlapping and padded windows") {
  for (auto [k, stride, pad] : {std::tuple{2, 2, 0}, std::tuple{3, 2, 1}, std::tuple{3, 1, 1}}) {
    CAPTURE(k);
    CAPTURE(stride);
    const kcpu::PoolGeometry geo{6, 9, 8, k, stride, pad};
    const std::int64_t in_n = 6 * 9 * 8, out_n = 6 * geo.oh() * geo.ow();
    const auto x = random_vector<float>(static_cast<std::size_t>(in_n), 70);
    const auto dy = random_vector<float>(static_cast<std::size_t>(out_n), 71);
    Tensor dx_in = upload(x, {in_n}), ddy = upload(dy, {out_n});
    Tensor y = Tensor::empty({out_n}, DType::f32, kDev), arg = Tensor::empty({out_n}, DType::i32, kDev);
    Tensor dx = Tensor::empty({in_n}, DType::f32, kDev);
    kc::max_pool2d_forward(geo, dx_in.device_data<float>(), y.device_data<float>(), arg.device_data<std::int32_t>(),
                           stream());
    kc::max_pool2d_backward(geo, ddy.device_data<float>(), arg.device_data<std::int32_t>(), dx.device_data<float>(),
                            false, stream());
    std::vector<float> wy(static_cast<std::size_t>(out_n)), wdx(static_cast<std::size_t>(in_n));
    std::vector<std::int32_t> warg(static_cast<std::size_t>(out_n));
    kcpu::max_pool2d_forward<float>(geo, x.data(), wy.data(), warg.data());
    kcpu::max_pool2d_backward<float>(geo, dy.data(), warg.data(), wdx.data(), false);
    CHECK(download<float>(y) == wy);
    CHECK(download<std::int32_t>(arg) == warg);
    check_close(download<float>(dx), wdx, 1e-6, 1e-7);  // atomics add overlapping windows in any order
  }
}

TEST_CASE("cuBLAS GEMM in every transposition equals the CPU GEMM; TF32 only when allowed") {
  const std::int64_t m = 37, n = 29, k = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const auto a = random_vector<double>(m * k, 80), b = random_vector<double>(k * n, 81);
      const auto c0 = random_vector<double>(m * n, 82);
      Tensor da = upload(a, {m * k}), db = upload(b, {k * n}), dc = upload(c0, {m * n});
      kcpu::GemmArgs<double> g{ta, tb, m, n, k, 0.5, nullptr, ta ? m : k, nullptr, tb ? k : n, 0.25, nullptr, n};
      auto gd = g;
      gd.a = da.device_data<double>();
      gd.b = db.device_data<double>();
      gd.c = dc.device_data<double>();
      kc::gemm(0, gd);
      auto want = c0;
      g.a = a.data();
      g.b = b.data();
      g.c = want.data();
      kcpu::gemm(g);
      check_close(download<double>(dc), want, 1e-12, 1e-13);
    }
  CHECK_FALSE(kc::tf32_allowed());
  // float32 without TF32: full-precision products, so within float rounding of a float64 GEMM.
  const std::int64_t s = 256;
  const auto a = random_vector<float>(s * s, 83), b = random_vector<float>(s * s, 84);
  Tensor da = upload(a, {s, s}), db = upload(b, {s, s}), dc = Tensor::empty({s, s}, DType::f32, kDev);
  kc::gemm(0, kcpu::GemmArgs<float>{false, false, s, s, s, 1, da.device_data<float>(), s, db.device_data<float>(), s,
                                    0, dc.device_data<float>(), s});
  const auto got = download<float>(dc);
  double worst = 0;
  for (std::int64_t i = 0; i < s; ++i)
    for (std::int64_t j = 0; j < s; ++j) {
      double ref = 0;
      for (std::int64_t q = 0; q < s; ++q) ref += double(a[i * s + q]) * double(b[q * s + j]);
      worst = std::max(worst, std::abs(ref - double(got[i * s + j])));
    }
  CHECK(worst < 1e-4);  // TF32 (10-bit mantissas) would be off by ~1e-2 here
}

#if STRATA_HAS_CUDNN
TEST_CASE("cuDNN convolution forward and backward equal the CPU's im2col convolution") {
  for (auto [stride, pad] : {std::pair{1, 0}, std::pair{1, 2}, std::pair{2, 1}}) {
    CAPTURE(stride);
    CAPTURE(pad);
    const std::int64_t N = 3, C = 4, H = 11, W = 10, OC = 5, K = 5;
    Generator gen(90);
    Tensor x = normal({N, C, H, W}, 0, 1, gen, DType::f64).detach().requires_grad_(true);
    Tensor w = normal({OC, C, K, K}, 0, 0.2, gen, DType::f64).detach().requires_grad_(true);
    Tensor y = conv2d(x, w, {}, stride, pad);
    Tensor dy = normal(y.shape(), 0, 1, gen, DType::f64);
    backward(sum(mul(y, dy)));
    const kcpu::ConvGeometry geo{N, C, H, W, K, K, stride, pad};
    Tensor gx = x.detach().to(kDev), gw = w.detach().to(kDev), gdy = dy.to(kDev);
    Tensor gy = Tensor::empty(y.shape(), DType::f64, kDev);
    Tensor gdx = Tensor::empty(x.shape(), DType::f64, kDev), gdw = Tensor::empty(w.shape(), DType::f64, kDev);
    kc::conv2d_forward<double>(0, geo, OC, gx.device_data<double>(), gw.device_data<double>(), gy.device_data<double>());
    kc::conv2d_backward_data<double>(0, geo, OC, gw.device_data<double>(), gdy.device_data<double>(),
                                     gdx.device_data<double>(), false);
    kc::conv2d_backward_filter<double>(0, geo, OC, gx.device_data<double>(), gdy.device_data<double>(),
                                       gdw.device_data<double>(), false);
    check_close(download<double>(gy), y.to_vector<double>(), 1e-10, 1e-12);
    check_close(download<double>(gdx), x.grad().to_vector<double>(), 1e-10, 1e-12);
    check_close(download<double>(gdw), w.grad().to_vector<double>(), 1e-10, 1e-12);
  }
}

TEST_CASE("cuDNN float32 convolution runs in full float32, not TF32, unless TF32 is allowed") {
  // 800-term dot products (C 32 x 5 x 5) of O(1) values: float32 is within ~1e-4 of the
  // float64 result, TF32 (10-bit mantissas) ~1e-2 off.
  const std::int64_t N = 2, C = 32, H = 12, W = 12, OC = 8, K = 5;
  Generator gen(91);
  Tensor x = normal({N, C, H, W}, 0, 1, gen, DType::f64), w = normal({OC, C, K, K}, 0, 1, gen, DType::f64);
  const std::vector<double> want = conv2d(x, w, {}, 1, 0).to_vector<double>();
  const kcpu::ConvGeometry geo{N, C, H, W, K, K, 1, 0};
  CHECK_FALSE(kc::tf32_allowed());
  Tensor gx = to_dtype(x, DType::f32).to(kDev), gw = to_dtype(w, DType::f32).to(kDev);
  Tensor gy = Tensor::empty({N, OC, H - K + 1, W - K + 1}, DType::f32, kDev);
  kc::conv2d_forward<float>(0, geo, OC, gx.device_data<float>(), gw.device_data<float>(), gy.device_data<float>());
  const auto got = download<float>(gy);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  CHECK(worst < 2e-3);  // float32 rounding of x and w, then of 800 products: ~1e-4; TF32: ~5e-2
}
#endif

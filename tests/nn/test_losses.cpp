// The losses of nn/loss.hpp: per-example values against float64 loops written from each
// loss's formula, gradients against finite differences, every reduction, padding rows, and
// the local-mean misuse inside a strategy with several replicas.
#include "doctest.hpp"
#include "support/labels.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <strata/strata.hpp>

using namespace strata;
using nn::Reduction;

namespace {

Tensor f64(const Shape& shape, std::uint64_t seed, double lo = -2, double hi = 2) {
  Generator g(seed);
  return uniform(shape, lo, hi, g, DType::f64);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
  }
}

/// Per-example reference: the mean over each row's elements of f(pred, target).
std::vector<double> per_row(const Tensor& pred, const Tensor& target, const std::function<double(double, double)>& f) {
  const auto p = values(pred), t = values(target);
  const std::int64_t n = pred.dim(0), m = pred.numel() / n;
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    double s = 0;
    for (std::int64_t k = 0; k < m; ++k) s += f(p[static_cast<std::size_t>(r * m + k)], t[static_cast<std::size_t>(r * m + k)]);
    out[static_cast<std::size_t>(r)] = s / static_cast<double>(m);
  }
  return out;
}

/// -log softmax(x_r)[c] for every row r and class c.
std::vector<std::vector<double>> neg_log_softmax(const Tensor& logits) {
  const auto x = values(logits);
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  std::vector<std::vector<double>> out(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    double mx = -INFINITY, z = 0;
    for (std::int64_t k = 0; k < c; ++k) mx = std::max(mx, x[static_cast<std::size_t>(r * c + k)]);
    for (std::int64_t k = 0; k < c; ++k) z += std::exp(x[static_cast<std::size_t>(r * c + k)] - mx);
    for (std::int64_t k = 0; k < c; ++k) out[static_cast<std::size_t>(r)].push_back(mx + std::log(z) - x[static_cast<std::size_t>(r * c + k)]);
  }
  return out;
}

}  // namespace

TEST_CASE("NN.Losses: per-example values equal the formulas") {
  const Tensor p = f64({6, 4}, 1), t = f64({6, 4}, 2), z = f64({6, 4}, 3, 0, 1);
  check_close(values(nn::mse_loss(p, t, Reduction::none)), per_row(p, t, [](double a, double b) { return (a - b) * (a - b); }));
  check_close(values(nn::l1_loss(p, t, Reduction::none)), per_row(p, t, [](double a, double b) { return std::fabs(a - b); }));
  for (double delta : {0.5, 1.0, 3.0}) {
    CAPTURE(delta);
    check_close(values(nn::huber_loss(p, t, delta, Reduction::none)), per_row(p, t, [delta](double a, double b) {
                  const double d = std::fabs(a - b);
                  return d <= delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
                }));
  }
  check_close(values(nn::bce_with_logits(p, z, Reduction::none)), per_row(p, z, [](double x, double y) {
                const double s = 1 / (1 + std::exp(-x));
                return -(y * std::log(s) + (1 - y) * std::log(1 - s));
              }));
  // One element per example: a [N] prediction is its own per-example loss.
  const Tensor p1 = f64({5}, 4), t1 = f64({5}, 5);
  check_close(values(nn::mse_loss(p1, t1, Reduction::none)), per_row(p1, t1, [](double a, double b) { return (a - b) * (a - b); }));
}

TEST_CASE("NN.Losses: cross-entropy with label smoothing, NLL, and padding rows") {
  const Tensor logits = f64({5, 4}, 6);
  const std::vector<std::int64_t> y{2, 0, 3, kPadLabel, 1};
  const auto nls = neg_log_softmax(logits);
  for (double e : {0.0, 0.1, 0.5}) {
    CAPTURE(e);
    std::vector<double> want;
    for (std::size_t r = 0; r < y.size(); ++r) {
      if (y[r] == kPadLabel) {
        want.push_back(0);
        continue;
      }
      double uniform = 0;
      for (double v : nls[r]) uniform += v / 4.0;
      want.push_back((1 - e) * nls[r][static_cast<std::size_t>(y[r])] + e * uniform);
    }
    check_close(values(nn::cross_entropy(logits, labels_of(y), Reduction::none, 0, e)), want);
    double total = 0;
    for (double v : want) total += v;
    CHECK(nn::cross_entropy(logits, labels_of(y), Reduction::sum, 0, e).item() == doctest::Approx(total).epsilon(1e-12));
    CHECK(nn::cross_entropy(logits, labels_of(y), Reduction::sum_over_global_batch, 9, e).item() ==
          doctest::Approx(total / 9).epsilon(1e-12));
  }
  std::vector<double> nll;
  const Tensor logp = log_softmax(logits);
  for (std::size_t r = 0; r < y.size(); ++r) nll.push_back(y[r] == kPadLabel ? 0 : nls[r][static_cast<std::size_t>(y[r])]);
  check_close(values(nn::nll_loss(logp, labels_of(y), Reduction::none)), nll);
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, labels_of({0, 1, 4, 2, 0}), Reduction::none),
                       doctest::Contains("label 4 of row 2 is outside [0, 4)"), invalid_argument);
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, labels_of(y), Reduction::mean, 0, 1.5),
                       doctest::Contains("label_smoothing must be in [0, 1]"), invalid_argument);
}

TEST_CASE("NN.Losses: per-example cross-entropy in float32 follows float64, large logits and padding rows included") {
  // The fused per-row kernel (Reduction::none) over a language model's 114 classes, whose
  // float exponentials run in vector packs: values and the gradient of Σ w_r loss_r against
  // float64 loops, logits up to ±60 (stable: logsumexp, not log of a softmax that underflows).
  const std::int64_t n = 37, c = 114;
  const Tensor logits64 = f64({n, c}, 21, -60, 60);
  std::vector<std::int64_t> y;
  for (std::int64_t r = 0; r < n; ++r) y.push_back(r % 9 == 4 ? kPadLabel : (r * 31) % c);
  const Tensor w64 = f64({n}, 22, 0.5, 1.5);
  const auto nls = neg_log_softmax(logits64);
  const auto w = values(w64);
  std::vector<double> want_loss, want_grad(static_cast<std::size_t>(n * c), 0.0);
  for (std::int64_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    want_loss.push_back(y[ur] == kPadLabel ? 0.0 : nls[ur][static_cast<std::size_t>(y[ur])]);
    if (y[ur] == kPadLabel) continue;
    for (std::int64_t k = 0; k < c; ++k) {  // w_r (softmax - onehot), softmax = e^{-(-log p)}
      const auto i = static_cast<std::size_t>(r * c + k);
      want_grad[i] = w[ur] * (std::exp(-nls[ur][static_cast<std::size_t>(k)]) - (k == y[ur] ? 1.0 : 0.0));
    }
  }
  Tensor logits = to_dtype(logits64, DType::f32).requires_grad_(true);
  const Tensor per = nn::cross_entropy(logits, labels_of(y), Reduction::none);
  REQUIRE(per.shape() == Shape{n});
  const auto got = values(to_dtype(per, DType::f64));
  for (std::size_t r = 0; r < got.size(); ++r) {
    CAPTURE(r);
    CHECK(got[r] == doctest::Approx(want_loss[r]).epsilon(1e-5).scale(1e-5));
  }
  const std::vector<Tensor> inputs{logits};
  const auto grads = grad(sum(mul(per, to_dtype(w64, DType::f32))), inputs);
  const auto g = values(to_dtype(grads[0], DType::f64));
  REQUIRE(g.size() == want_grad.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == doctest::Approx(want_grad[i]).epsilon(1e-5).scale(1e-6));
  }
}

TEST_CASE("NN.Losses: gradients equal finite differences") {
  const Tensor t = f64({4, 3}, 11), z = f64({4, 3}, 12, 0, 1);
  const std::vector<std::int64_t> y{1, kPadLabel, 2, 0};
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> losses{
      {"mse", [&](const Tensor& p) { return nn::mse_loss(p, t, Reduction::none); }},
      {"l1", [&](const Tensor& p) { return nn::l1_loss(p, t, Reduction::none); }},
      {"huber", [&](const Tensor& p) { return nn::huber_loss(p, t, 0.7, Reduction::none); }},
      {"bce_with_logits", [&](const Tensor& p) { return nn::bce_with_logits(p, z, Reduction::none); }},
      {"nll", [&](const Tensor& p) { return nn::nll_loss(log_softmax(p), labels_of(y), Reduction::none); }},
      {"cross_entropy smoothed", [&](const Tensor& p) { return nn::cross_entropy(p, labels_of(y), Reduction::none, 0, 0.2); }},
      {"cross_entropy per example", [&](const Tensor& p) { return nn::cross_entropy(p, labels_of(y), Reduction::none); }},
      {"cross_entropy fused", [&](const Tensor& p) { return nn::cross_entropy(p, labels_of(y), Reduction::sum_over_global_batch, 7); }},
      {"compute_average_loss", [&](const Tensor& p) { return compute_average_loss(nn::mse_loss(p, t, Reduction::none), 10); }},
  };
  for (const auto& entry : losses) {  // not a structured binding: the lambda below captures fn
    const std::string& name = entry.first;
    const Fn& fn = entry.second;
    CAPTURE(name);
    // Inputs away from the kinks of |x| and min(|x|, delta), where a finite difference straddles two pieces.
    Tensor p = f64({4, 3}, 13);
    const auto tv = values(t);
    auto pv = values(p);
    for (std::size_t i = 0; i < pv.size(); ++i)
      if (std::fabs(std::fabs(pv[i] - tv[i]) - 0.7) < 0.05 || std::fabs(pv[i] - tv[i]) < 0.05) pv[i] += 0.2;
    p = from_vector<double>({4, 3}, pv).requires_grad_(true);
    const auto r = gradcheck([&](const std::vector<Tensor>& in) { return fn(in[0]); }, {p});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("NN.Losses: bce_with_logits has the derivative sigmoid(x) - z at x = 0, and a target gradient") {
  // A zero logit (a zero-initialised output layer: every logit of word2vec's first step) is
  // where max(x, 0) and |x| have their kinks; the loss is smooth there, its slope 1/2 - z.
  Tensor x = zeros({2, 3}, DType::f64).requires_grad_(true);
  const Tensor z = from_vector<double>({2, 3}, {1, 0, 0.25, 0, 1, 0.5}, DType::f64);
  strata::backward(nn::bce_with_logits(x, z, Reduction::sum));
  const auto g = x.grad().to_vector<double>(), zv = values(z);
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx((0.5 - zv[i]) / 3).epsilon(1e-15));
  // Learned targets (distillation): d/dz = -x, checked against finite differences.
  const Tensor logits = f64({3, 2}, 14);
  Tensor zt = f64({3, 2}, 15, 0, 1).requires_grad_(true);
  const auto r = gradcheck([&](const std::vector<Tensor>& in) { return nn::bce_with_logits(logits, in[0], Reduction::none); }, {zt});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("NN.Losses: every reduction of the per-example losses") {
  const Tensor p = f64({6, 2}, 21), t = f64({6, 2}, 22);
  const auto per = values(nn::mse_loss(p, t, Reduction::none));
  double total = 0;
  for (double v : per) total += v;
  CHECK(nn::mse_loss(p, t, Reduction::sum).item() == doctest::Approx(total).epsilon(1e-12));
  CHECK(nn::mse_loss(p, t).item() == doctest::Approx(total / 6).epsilon(1e-12));
  CHECK(nn::mse_loss(p, t, Reduction::local_mean).item() == doctest::Approx(total / 6).epsilon(1e-12));
  CHECK(nn::mse_loss(p, t, Reduction::sum_over_global_batch, 15).item() == doctest::Approx(total / 15).epsilon(1e-12));
  CHECK(compute_average_loss(nn::mse_loss(p, t, Reduction::none), 15).item() == doctest::Approx(total / 15).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(nn::mse_loss(p, t, Reduction::sum_over_global_batch),
                       doctest::Contains("needs the global batch size (Batch::global_size), got 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(nn::mse_loss(p, f64({6, 3}, 1)), doctest::Contains("mse_loss: predictions [6, 2] and targets [6, 3]"),
                       invalid_argument);
  // A batch's padding rows (Remainder::pad) count nowhere.
  data::Batch b;
  b.size = 6;
  b.padding = 2;
  b.global_size = 11;
  CHECK(compute_average_loss(nn::mse_loss(p, t, Reduction::none), b).item() ==
        doctest::Approx((per[0] + per[1] + per[2] + per[3]) / 11).epsilon(1e-12));
}

TEST_CASE("NN.Losses: a local mean inside run() with several replicas is an error that says what to use") {
  const Tensor p = f64({4, 2}, 31), t = f64({4, 2}, 32);
  auto local_mean = [&](strata::ReplicaContext&) { return nn::mse_loss(p, t).item(); };
  MirroredStrategy<> mirrored(2);
  CHECK_THROWS_WITH_AS(mirrored.run(local_mean),
                       doctest::Contains("mse_loss with Reduction::mean inside Strategy::run with 2 replicas in sync"),
                       invalid_argument);
  CentralStorageStrategy central(3);
  CHECK_THROWS_WITH_AS(central.run(local_mean), doctest::Contains("Use Reduction::sum_over_global_batch"),
                       invalid_argument);
  Tensor logits = f64({4, 3}, 33);
  CHECK_THROWS_WITH_AS(mirrored.run([&](strata::ReplicaContext&) {
                         return nn::cross_entropy(logits, labels_of({0, 1, 2, 0})).item();
                       }),
                       doctest::Contains("cross_entropy with Reduction::mean inside Strategy::run"), invalid_argument);
  // The opt-in, one replica, and outside run: no error.
  const auto chosen = mirrored.run([&](strata::ReplicaContext&) { return nn::mse_loss(p, t, Reduction::local_mean).item(); });
  CHECK(mirrored.reduce(ReduceOp::Sum, chosen) == doctest::Approx(2 * nn::mse_loss(p, t).item()).epsilon(1e-12));
  OneDeviceStrategy one;
  CHECK_NOTHROW(one.run(local_mean));
  MirroredStrategy<> single(1);
  CHECK_NOTHROW(single.run(local_mean));
}

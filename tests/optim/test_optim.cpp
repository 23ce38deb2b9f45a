#include "doctest.hpp"

#include <cmath>
#include <vector>

#include <strata/strata.hpp>

using strata::Tensor;

namespace {

// Three steps on f(p) = sum(c * p^2 / 2) (gradient c * p), applied through the optimizer.
template <class Opt, class... Args>
std::vector<double> run_optimizer(const std::vector<double>& p0, const std::vector<double>& c, Args... args) {
  Tensor p = strata::from_vector<double>({static_cast<std::int64_t>(p0.size())}, p0, strata::DType::f64).requires_grad_();
  Tensor cc = strata::from_vector<double>({static_cast<std::int64_t>(c.size())}, c, strata::DType::f64);
  const std::vector<Tensor> params{p};
  Opt opt(params, args...);
  for (int step = 0; step < 3; ++step) opt.apply_gradients(strata::grad(strata::sum(cc * p * p * 0.5), params));
  return p.to_vector<double>();
}

}  // namespace

TEST_CASE("Optim.Sgd.MatchesTorchFormulas") {
  const std::vector<double> p0{1.0, -2.0}, c{0.5, 3.0};
  for (bool nesterov : {false, true})
    for (double wd : {0.0, 0.1}) {
      const double lr = 0.1, mu = 0.9;
      // The update of torch.optim.SGD, written out.
      std::vector<double> p = p0, buf(2);
      for (int step = 0; step < 3; ++step)
        for (int i = 0; i < 2; ++i) {
          const double d = c[static_cast<std::size_t>(i)] * p[static_cast<std::size_t>(i)] + wd * p[static_cast<std::size_t>(i)];
          buf[static_cast<std::size_t>(i)] = step == 0 ? d : mu * buf[static_cast<std::size_t>(i)] + d;
          p[static_cast<std::size_t>(i)] -= lr * (nesterov ? d + mu * buf[static_cast<std::size_t>(i)] : buf[static_cast<std::size_t>(i)]);
        }
      const auto got = run_optimizer<strata::optim::Sgd>(p0, c, lr,
                                                         strata::optim::SgdOptions{mu, 0, wd, nesterov});
      INFO("nesterov=", nesterov, " wd=", wd);
      CHECK(got[0] == doctest::Approx(p[0]).epsilon(1e-14));
      CHECK(got[1] == doctest::Approx(p[1]).epsilon(1e-14));
    }
  // Plain SGD: p -= lr * g.
  const auto plain = run_optimizer<strata::optim::Sgd>({2.0}, {1.0}, 0.5, strata::optim::SgdOptions{});
  CHECK(plain[0] == doctest::Approx(2.0 * 0.5 * 0.5 * 0.5));
}

TEST_CASE("Optim.Adam.MatchesTorchFormulas") {
  const std::vector<double> p0{1.0, -2.0}, c{0.5, 3.0};
  for (bool decoupled : {false, true}) {
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
    std::vector<double> p = p0, m(2), v(2);
    for (int t = 1; t <= 3; ++t)
      for (std::size_t i = 0; i < 2; ++i) {
        double g = c[i] * p[i];
        if (decoupled) p[i] *= 1 - lr * wd; else g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
    const strata::optim::AdamOptions o{b1, b2, eps, wd};
    const auto got = decoupled ? run_optimizer<strata::optim::AdamW>(p0, c, lr, o)
                               : run_optimizer<strata::optim::Adam>(p0, c, lr, o);
    INFO("decoupled=", decoupled);
    CHECK(got[0] == doctest::Approx(p[0]).epsilon(1e-12));
    CHECK(got[1] == doctest::Approx(p[1]).epsilon(1e-12));
  }
}

TEST_CASE("Optim.State.IsNamedAndGradientsMustMatch") {
  Tensor a = strata::ones({2}).requires_grad_(), b = strata::ones({3}).requires_grad_();
  const std::vector<Tensor> params{a, b}, others{b, a};
  strata::optim::Sgd opt(params, 0.1, 0.9);
  opt.apply_gradients(strata::grad(strata::sum(a) + strata::sum(b * 2.0), params));
  const auto st = opt.state();
  REQUIRE(st.size() == 2);
  CHECK(st[0].first == "momentum_buffer.0");
  CHECK(opt.steps() == 1);
  CHECK_THROWS_AS(opt.apply_gradients(strata::grad(strata::sum(a) + strata::sum(b), others)), strata::invalid_argument);
  CHECK_THROWS_AS(strata::optim::Sgd(params, -1.0), strata::invalid_argument);
}

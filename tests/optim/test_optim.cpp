#include "doctest.hpp"

#include <cmath>
#include <numbers>
#include <utility>
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

TEST_CASE("Optim.Adam.FloatPassEqualsTheElementUpdateBitForBit") {
  // The float pass runs packs of 16 where the CPU has AVX-512, the element update elsewhere and
  // in the tail: the two must agree to the bit, whatever range a split update hands a replica.
  for (bool decoupled : {false, true})
    for (std::int64_t n : {1, 15, 16, 37, 100}) {
      std::vector<float> p(static_cast<std::size_t>(n)), g(p.size()), m(p.size()), v(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) {
        p[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 2.0);
        g[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)) * (i % 5 == 0 ? 1e-6 : 0.5));
        m[i] = static_cast<float>(0.01 * static_cast<double>(i % 7));
        v[i] = static_cast<float>(1e-4 * static_cast<double>(i % 3));
      }
      auto p1 = p, m1 = m, v1 = v;
      const strata::kernels::math::AdamParams o{0.01, 0.9, 0.999, 1e-8, 0.05, decoupled, 3};
      strata::kernels::cpu::adam_step<float>(n, p.data(), g.data(), m.data(), v.data(), o);
      const auto c = strata::kernels::math::adam_coeffs<float>(o);
      for (std::size_t i = 0; i < p1.size(); ++i) strata::kernels::math::adam_update(p1[i], g[i], m1[i], v1[i], c);
      INFO("n=", n, " decoupled=", decoupled);
#ifndef __FMA__  // (built for a CPU with FMA, the element update's products may be contracted)
      CHECK(p == p1);
      CHECK(m == m1);
      CHECK(v == v1);
#else
      for (std::size_t i = 0; i < p1.size(); ++i) CHECK(p[i] == doctest::Approx(p1[i]).epsilon(1e-6));
#endif
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

TEST_CASE("Optim.Schedules: each schedule's rate at each step") {
  using strata::optim::Schedule;
  const auto c = Schedule::constant(0.1);
  CHECK(c(0) == 0.1);
  CHECK(c(1000) == 0.1);
  const auto p = Schedule::piecewise({3, 5}, {1.0, 0.5, 0.25});
  const std::vector<double> pw{1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25};
  for (std::int64_t k = 0; k < 7; ++k) CHECK(p(k) == pw[static_cast<std::size_t>(k)]);
  const auto e = Schedule::exponential(0.8, 0.5, 4), es = Schedule::exponential(0.8, 0.5, 4, true);
  for (std::int64_t k : {0, 1, 4, 6, 9}) {
    CHECK(e(k) == doctest::Approx(0.8 * std::pow(0.5, static_cast<double>(k) / 4.0)).epsilon(1e-15));
    CHECK(es(k) == doctest::Approx(0.8 * std::pow(0.5, static_cast<double>(k / 4))).epsilon(1e-15));
  }
  const auto cos = Schedule::cosine(1.0, 10, 2, 0.1);
  CHECK(cos(0) == doctest::Approx(0.5));
  CHECK(cos(1) == doctest::Approx(1.0));
  CHECK(cos(2) == doctest::Approx(1.0));                                         // the peak, after the warm-up
  CHECK(cos(6) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.5))));  // half-way down
  CHECK(cos(10) == doctest::Approx(0.1));
  CHECK(cos(50) == doctest::Approx(0.1));
  const Schedule user([](std::int64_t k) { return 1.0 / static_cast<double>(k + 1); });
  CHECK(user(3) == 0.25);
  CHECK_THROWS_WITH_AS(Schedule::piecewise({3, 2}, {1, 2, 3}), doctest::Contains("positive and increasing"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(Schedule::piecewise({3}, {1}), doctest::Contains("1 boundaries need 2 values"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(Schedule::cosine(1.0, 5, 5), doctest::Contains("0 <= warmup_steps < total_steps"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(Schedule([](std::int64_t) { return -1.0; })(7),
                       doctest::Contains("the learning rate at step 7 is -1"), strata::invalid_argument);
}

TEST_CASE("Optim.Schedules: the optimizer's rate follows its step count, also after load_state") {
  using strata::optim::Schedule;
  const auto sched = Schedule::piecewise({2, 4}, {0.5, 0.1, 0.01});
  auto run = [&](int steps) {
    strata::Tensor w = strata::full({1}, 1.0, strata::DType::f64).requires_grad_(true);
    strata::optim::Sgd opt({w}, 123.0);  // the schedule overrides the constructor's rate
    opt.set_schedule(sched);
    for (int k = 0; k < steps; ++k) {
      strata::Tensor loss = strata::mul(w, 2.0);  // gradient 2 at every step
      opt.apply_gradients(strata::grad(loss, opt.params()));
      CHECK(opt.lr() == sched(k));
    }
    return std::pair{w.item(), opt.steps()};
  };
  const auto [w6, n6] = run(6);
  CHECK(n6 == 6);
  CHECK(w6 == doctest::Approx(1.0 - 2.0 * (0.5 + 0.5 + 0.1 + 0.1 + 0.01 + 0.01)).epsilon(1e-14));
  // Three steps, then a fresh optimizer resumed from their state: the rate continues at step 3.
  strata::Tensor w = strata::full({1}, 1.0, strata::DType::f64).requires_grad_(true);
  strata::optim::Sgd first({w}, 0.0);
  first.set_schedule(sched);
  for (int k = 0; k < 3; ++k) first.apply_gradients(strata::grad(strata::mul(w, 2.0), first.params()));
  CHECK(first.lr() == 0.1);
  strata::optim::Sgd resumed({w}, 0.0);
  resumed.set_schedule(sched);
  resumed.load_state(first.state(), first.steps());
  resumed.apply_gradients(strata::grad(strata::mul(w, 2.0), resumed.params()));
  CHECK(resumed.lr() == 0.1);  // step 3
  resumed.apply_gradients(strata::grad(strata::mul(w, 2.0), resumed.params()));
  CHECK(resumed.lr() == 0.01);  // step 4
  CHECK(w.item() == doctest::Approx(run(5).first).epsilon(1e-14));  // five steps, uninterrupted
}

TEST_CASE("Optim.GradientTransforms: float32 gradients clip by their global norm as float64 says") {
  // Sizes around the host sum's blocks of 1024 and lanes of 16 (tails of every kind), values
  // over six decades; the reference is the float64 norm of the same float values.
  strata::Generator gen(41);
  std::vector<Tensor> params;
  for (std::int64_t n : {1, 15, 16, 1023, 1024, 1025, 5000, 70001}) {
    Tensor v = strata::mul(strata::normal({n}, 0, 1, gen), strata::exp(strata::uniform({n}, -7, 7, gen)));
    params.push_back(v.requires_grad_(true));
  }
  Tensor loss = strata::sum(strata::mul(params[0], params[0].detach()));
  for (std::size_t i = 1; i < params.size(); ++i)
    loss = strata::add(loss, strata::sum(strata::mul(params[i], params[i].detach())));
  const strata::Gradients g = strata::grad(loss, params);  // p itself
  double sq = 0;
  std::vector<std::vector<float>> before;
  for (std::size_t i = 0; i < g.size(); ++i) {
    before.push_back(g[i].to_vector<float>());
    for (float v : before.back()) sq += static_cast<double>(v) * v;
  }
  const double norm = strata::optim::GradientTransforms::global_norm(g);
  CHECK(norm == doctest::Approx(std::sqrt(sq)).epsilon(1e-6));
  strata::optim::GradientTransforms clip;
  clip.max_global_norm = norm / 3;
  clip.apply(g);
  const auto factor = static_cast<float>(clip.max_global_norm / norm);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const std::vector<float> after = g[i].to_vector<float>();
    REQUIRE(after.size() == before[i].size());
    std::size_t wrong = 0;
    for (std::size_t j = 0; j < after.size(); ++j) wrong += after[j] != before[i][j] * factor;
    CHECK(wrong == 0);
  }
  // Under the bound nothing changes; a NaN norm passes the gradients through (as tf does).
  clip.max_global_norm = 1e30;
  const std::vector<float> kept = g[7].to_vector<float>();
  clip.apply(g);
  CHECK(g[7].to_vector<float>() == kept);
  g[2].copy_(strata::full({16}, NAN));
  CHECK(std::isnan(strata::optim::GradientTransforms::global_norm(g)));
  clip.max_global_norm = 1;
  clip.apply(g);
  CHECK(g[7].to_vector<float>() == kept);
}

TEST_CASE("Optim.GradientTransforms: clipping by global norm and by value, and a user's transform") {
  auto step = [](auto configure, std::vector<double> g0, std::vector<double> g1) {
    strata::Tensor a = strata::zeros({2}, strata::DType::f64).requires_grad_(true);
    strata::Tensor b = strata::zeros({3}, strata::DType::f64).requires_grad_(true);
    strata::optim::Sgd opt({a, b}, 1.0);  // plain SGD, rate 1: the update is minus the gradient
    configure(opt);
    // The loss sum(a * g0) + sum(b * g1) has the gradients g0 and g1.
    strata::Tensor loss = strata::add(strata::sum(strata::mul(a, strata::from_vector<double>({2}, g0))),
                                      strata::sum(strata::mul(b, strata::from_vector<double>({3}, g1))));
    opt.apply_gradients(strata::grad(loss, opt.params()));
    std::vector<double> out = a.to_vector<double>(), rest = b.to_vector<double>();
    out.insert(out.end(), rest.begin(), rest.end());
    for (double& v : out) v = -v;
    return out;  // the transformed gradients
  };
  const std::vector<double> g0{3, -4}, g1{0, 12, 0};  // global norm 13
  auto norm = step([](auto& o) { o.clip_by_global_norm(6.5); }, g0, g1);
  const std::vector<double> half{1.5, -2, 0, 6, 0};
  for (std::size_t i = 0; i < 5; ++i) CHECK(norm[i] == doctest::Approx(half[i]).epsilon(1e-15));
  CHECK(step([](auto& o) { o.clip_by_global_norm(13.5); }, g0, g1) == std::vector<double>{3, -4, 0, 12, 0});
  CHECK(step([](auto& o) { o.clip_by_value(3.5); }, g0, g1) == std::vector<double>{3, -3.5, 0, 3.5, 0});
  // The user's transform first, then value, then norm: doubled (6, -8, 0, 24, 0), clamped to
  // 10 (6, -8, 0, 10, 0), norm sqrt(200) scaled to 5.
  auto all = step(
      [](auto& o) {
        o.set_gradient_transform([](const strata::Gradients& g) {
          for (std::size_t i = 0; i < g.size(); ++i) g[i].copy_(strata::mul(g[i], 2.0));
        });
        o.clip_by_value(10);
        o.clip_by_global_norm(5);
      },
      g0, g1);
  const double s = 5 / std::sqrt(200.0);
  const std::vector<double> want{6 * s, -8 * s, 0, 10 * s, 0};
  for (std::size_t i = 0; i < 5; ++i) CHECK(all[i] == doctest::Approx(want[i]).epsilon(1e-14));
  strata::Tensor w = strata::zeros({1}).requires_grad_(true);
  strata::optim::Sgd opt({w}, 0.1);
  CHECK_THROWS_WITH_AS(opt.clip_by_global_norm(-1), doctest::Contains("max_norm must be finite and non-negative"),
                       strata::invalid_argument);
}

TEST_CASE("Optim.HoldShards: two optimizers over disjoint shards update as one over the whole, bit for bit") {
  // Parameters of 7 and 3 elements; shard A holds elements [0, 5) of the first and none of the
  // second, shard B the rest. Each shard's gradient is the whole gradient's elements there, so
  // the two shard optimizers together must give the whole one's parameters and state exactly.
  auto make = [] {
    strata::Generator g(3);
    return std::vector<Tensor>{strata::uniform({7}, -1, 1, g).requires_grad_(), strata::uniform({3}, -1, 1, g).requires_grad_()};
  };
  const std::vector<Tensor> whole = make(), a = make(), b = make();
  strata::optim::Adam reference(whole, 0.05, {.weight_decay = 0.01});
  strata::optim::Adam left(a, 0.05, {.weight_decay = 0.01}), right(b, 0.05, {.weight_decay = 0.01});
  auto shard = [](const Tensor& p, std::int64_t lo, std::int64_t hi) {
    return strata::detail::make_view(p, {hi - lo}, {1}, p.impl()->offset() + lo);
  };
  const std::vector<Tensor> sa{shard(a[0], 0, 5), shard(a[1], 0, 0)}, sb{shard(b[0], 5, 7), shard(b[1], 0, 3)};
  left.hold_shards(sa);
  right.hold_shards(sb);
  CHECK(left.holds_shards());
  strata::Generator g(9);
  for (int step = 0; step < 3; ++step) {
    const Tensor g0 = strata::uniform({7}, -1, 1, g), g1 = strata::uniform({3}, -1, 1, g);
    whole[0].impl()->ag.grad = g0.clone();
    whole[1].impl()->ag.grad = g1.clone();
    reference.step();
    sa[0].impl()->ag.grad = shard(g0, 0, 5).clone();
    sa[1].impl()->ag.grad = shard(g1, 0, 0).clone();
    sb[0].impl()->ag.grad = shard(g0, 5, 7).clone();
    sb[1].impl()->ag.grad = shard(g1, 0, 3).clone();
    left.step();
    right.step();
  }
  for (int i = 0; i < 7; ++i) CHECK((i < 5 ? a : b)[0].to_vector<float>()[i] == whole[0].to_vector<float>()[i]);
  CHECK(b[1].to_vector<float>() == whole[1].to_vector<float>());
  // The state is the shards': 2 x (5 + 0) and 2 x (2 + 3) elements; load_state checks its shapes.
  std::int64_t held = 0;
  for (const auto& [name, t] : left.state()) held += t.numel();
  CHECK(held == 10);
  CHECK_THROWS_WITH_AS(left.load_state(reference.state(), 3), doctest::Contains("for this rank's shard of it"),
                       strata::invalid_argument);
  // Shards that are no 1-D part of their parameter, or a transform of the user's, are refused.
  strata::optim::Sgd sgd(make(), 0.1);
  CHECK_THROWS_WITH_AS(sgd.hold_shards({strata::zeros({1, 7}), shard(a[1], 0, 3)}), doctest::Contains("no contiguous 1-D part"),
                       strata::invalid_argument);
  sgd.set_gradient_transform([](const strata::Gradients&) {});
  const std::vector<Tensor> fresh = make();
  CHECK_THROWS_WITH_AS(sgd.hold_shards({shard(fresh[0], 0, 7), shard(fresh[1], 0, 3)}), doctest::Contains("only their shards"),
                       strata::invalid_argument);
}

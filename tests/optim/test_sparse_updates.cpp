// The optimizers on row-sparse tables (docs/design/sparse_tables.md): the lazy rule against its
// definition written out in double, the dense rule against a run with dense gradients, and
// the same rows updated whether the gradient arrives in rows, dense, or in ranges.
#include "doctest.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <strata/strata.hpp>

using strata::Tensor;
using strata::TableGradient;

namespace {

constexpr std::int64_t kRows = 7, kWidth = 3;

// The lookups of step s: some rows twice, some steps missing rows others had.
const std::vector<std::vector<std::int64_t>> kLookups{{1, 4, 4}, {0, 4}, {6, 1, 1, 1}, {4}};

Tensor lookups(int step) {
  const auto& v = kLookups[static_cast<std::size_t>(step)];
  return strata::from_vector<std::int64_t>({static_cast<std::int64_t>(v.size())}, v);
}

// Output weights per lookup position: loss = sum_j sum_c c_{j,c} * table[idx_j, c]^2 / 2 + sum c' table[idx_j,c].
double coef(std::size_t j, std::int64_t c) { return 0.5 + 0.25 * static_cast<double>(j) + 0.1 * static_cast<double>(c); }

Tensor loss_of(const Tensor& w, int step, TableGradient g) {
  const Tensor y = strata::embedding(w, lookups(step), g);
  const std::int64_t n = y.dim(0);
  std::vector<double> cs;
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t c = 0; c < kWidth; ++c) cs.push_back(coef(static_cast<std::size_t>(j), c));
  const Tensor cw = strata::from_vector<double>({n, kWidth}, cs, w.dtype());
  return strata::sum(cw * y * y * 0.5 + y * 0.3);
}

// The gradient of loss_of in double: row r gains c_{j,c} * p + 0.3 for each lookup j of r.
std::vector<double> gradient(const std::vector<double>& p, int step, std::vector<bool>& present) {
  std::vector<double> g(p.size(), 0.0);
  present.assign(kRows, false);
  const auto& ix = kLookups[static_cast<std::size_t>(step)];
  for (std::size_t j = 0; j < ix.size(); ++j) {
    present[static_cast<std::size_t>(ix[j])] = true;
    for (std::int64_t c = 0; c < kWidth; ++c) {
      const auto at = static_cast<std::size_t>(ix[j] * kWidth + c);
      g[at] += coef(j, c) * p[at] + 0.3;
    }
  }
  return g;
}

Tensor start_table(strata::DType dt) {
  strata::Generator gen(11);
  return strata::uniform({kRows, kWidth}, -1, 1, gen, dt).requires_grad_();
}

using MakeOpt = std::function<std::unique_ptr<strata::optim::Optimizer>(std::vector<Tensor>)>;

// Four steps; `how` says how the gradient reaches the optimizer.
enum class Arrives { rows, dense_values, ranges, row_ranges };
std::vector<double> train(const MakeOpt& make, TableGradient g, strata::DType dt, Arrives how = Arrives::rows,
                          strata::optim::SparseUpdates rule = strata::optim::SparseUpdates::lazy) {
  Tensor w = start_table(dt);
  const std::vector<Tensor> params{w};
  auto opt = make(params);
  opt->set_sparse_updates(rule);
  for (int s = 0; s < static_cast<int>(kLookups.size()); ++s) {
    const strata::Gradients grads = strata::grad(loss_of(w, s, g), params);
    if (how == Arrives::dense_values) (void)w.grad();  // as a strategy's dense all-reduce leaves it
    if (how == Arrives::ranges || how == Arrives::row_ranges) {
      // Two replicas' ranges, cutting row 1 (looked up in steps 0 and 2) in two; the gradient
      // dense, or still in rows (as a gather of rows leaves it).
      if (how == Arrives::ranges) (void)w.grad();
      CHECK(w.has_row_grad() == (how == Arrives::row_ranges));
      const std::vector<strata::optim::ElementRange> first{{0, 4}}, second{{4, kRows * kWidth}};
      opt->step_ranges(first);
      opt->load_state(opt->state(), opt->steps() - 1);  // the second replica's range, at the same step
      opt->step_ranges(second);
    } else {
      opt->apply_gradients(grads);
    }
  }
  return w.to_vector<double>();
}

}  // namespace

TEST_CASE("SparseUpdates: lazy SGD with momentum and weight decay, as written out") {
  const double lr = 0.1, mu = 0.9, wd = 0.05;
  std::vector<double> p = start_table(strata::DType::f64).to_vector<double>(), buf(p.size(), 0.0);
  for (int s = 0; s < static_cast<int>(kLookups.size()); ++s) {
    std::vector<bool> present;
    const std::vector<double> g = gradient(p, s, present);
    for (std::int64_t r = 0; r < kRows; ++r) {
      if (!present[static_cast<std::size_t>(r)]) continue;  // lazy: the row and its momentum untouched
      for (std::int64_t c = 0; c < kWidth; ++c) {
        const auto at = static_cast<std::size_t>(r * kWidth + c);
        const double d = g[at] + wd * p[at];
        buf[at] = s == 0 ? d : mu * buf[at] + d;  // dampening 0: a new row's buffer starts at d too
        p[at] -= lr * buf[at];
      }
    }
  }
  const MakeOpt sgd = [&](std::vector<Tensor> ps) {
    return std::make_unique<strata::optim::Sgd>(std::move(ps), lr, strata::optim::SgdOptions{mu, 0, wd});
  };
  const auto got = train(sgd, TableGradient::row_sparse, strata::DType::f64);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(got[i] == doctest::Approx(p[i]).epsilon(1e-13));
  // Row 5 is never looked up: it keeps its value, though weight decay would have moved it.
  CHECK(got[15] == start_table(strata::DType::f64).to_vector<double>()[15]);
}

TEST_CASE("SparseUpdates: lazy Adam is SparseAdam's rule, bias correction by the step count") {
  const double lr = 0.05, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  std::vector<double> p = start_table(strata::DType::f64).to_vector<double>(), m(p.size(), 0.0), v(p.size(), 0.0);
  for (int s = 0; s < static_cast<int>(kLookups.size()); ++s) {
    std::vector<bool> present;
    const std::vector<double> g = gradient(p, s, present);
    const int t = s + 1;
    for (std::size_t at = 0; at < p.size(); ++at) {
      if (!present[at / kWidth]) continue;
      m[at] = b1 * m[at] + (1 - b1) * g[at];
      v[at] = b2 * v[at] + (1 - b2) * g[at] * g[at];
      p[at] -= lr * (m[at] / (1 - std::pow(b1, t))) / (std::sqrt(v[at] / (1 - std::pow(b2, t))) + eps);
    }
  }
  const MakeOpt adam = [&](std::vector<Tensor> ps) {
    return std::make_unique<strata::optim::Adam>(std::move(ps), lr, strata::optim::AdamOptions{b1, b2, eps, 0});
  };
  const auto got = train(adam, TableGradient::row_sparse, strata::DType::f64);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(got[i] == doctest::Approx(p[i]).epsilon(1e-12));
}

TEST_CASE("SparseUpdates: the same rows however the gradient arrives; the dense rule is a dense run") {
  const MakeOpt opts[] = {
      [](std::vector<Tensor> ps) { return std::make_unique<strata::optim::Sgd>(std::move(ps), 0.1, strata::optim::SgdOptions{0.9, 0, 0.01}); },
      [](std::vector<Tensor> ps) { return std::make_unique<strata::optim::Adam>(std::move(ps), 0.05); },
      [](std::vector<Tensor> ps) { return std::make_unique<strata::optim::AdamW>(std::move(ps), 0.05); },
  };
  for (std::size_t k = 0; k < std::size(opts); ++k) {
    INFO("optimizer ", k);
    const auto rows = train(opts[k], TableGradient::row_sparse, strata::DType::f32);
    CHECK(train(opts[k], TableGradient::row_sparse, strata::DType::f32, Arrives::dense_values) == rows);
    CHECK(train(opts[k], TableGradient::row_sparse, strata::DType::f32, Arrives::ranges) == rows);
    CHECK(train(opts[k], TableGradient::row_sparse, strata::DType::f32, Arrives::row_ranges) == rows);
    // The dense rule: bit for bit the run with dense gradients, and not the lazy one.
    const auto dense = train(opts[k], TableGradient::dense, strata::DType::f32);
    CHECK(train(opts[k], TableGradient::row_sparse, strata::DType::f32, Arrives::rows,
                strata::optim::SparseUpdates::dense) == dense);
    CHECK(dense != rows);
  }
  // Plain SGD: lazy and dense agree (a row without gradient does not move either way).
  const MakeOpt plain = [](std::vector<Tensor> ps) { return std::make_unique<strata::optim::Sgd>(std::move(ps), 0.1); };
  CHECK(train(plain, TableGradient::row_sparse, strata::DType::f32) == train(plain, TableGradient::dense, strata::DType::f32));
}

TEST_CASE("SparseUpdates: clipping and the non-finite policy read the rows") {
  auto clipped = [](TableGradient g, double max_norm, double max_value) {
    Tensor w = start_table(strata::DType::f64);
    const std::vector<Tensor> params{w};
    strata::optim::Sgd opt(params, 0.1);
    opt.clip_by_global_norm(max_norm);
    opt.clip_by_value(max_value);
    const strata::Gradients grads = strata::grad(loss_of(w, 0, g), params);
    const double norm = strata::optim::GradientTransforms::global_norm(grads);
    CHECK(w.has_row_grad() == (g == TableGradient::row_sparse));  // the norm read the rows, not a dense copy
    opt.apply_gradients(grads);
    return std::pair{norm, w.to_vector<double>()};
  };
  const auto [dense_norm, dense] = clipped(TableGradient::dense, 0.5, 1.2);
  const auto [rows_norm, rows] = clipped(TableGradient::row_sparse, 0.5, 1.2);
  CHECK(rows_norm == doctest::Approx(dense_norm).epsilon(1e-14));
  REQUIRE(dense.size() == rows.size());
  for (std::size_t i = 0; i < dense.size(); ++i) CHECK(rows[i] == doctest::Approx(dense[i]).epsilon(1e-14));

  Tensor w = start_table(strata::DType::f32);
  const std::vector<Tensor> params{w};
  strata::optim::Sgd opt(params, 0.1);
  opt.set_nonfinite(strata::optim::NonFinite::skip);
  const Tensor before = w.clone();
  const strata::Gradients grads = strata::grad(loss_of(w, 0, TableGradient::row_sparse) * INFINITY, params);
  opt.apply_gradients(grads);
  CHECK(opt.skipped_steps() == 1);
  CHECK(w.to_vector<float>() == before.to_vector<float>());
}

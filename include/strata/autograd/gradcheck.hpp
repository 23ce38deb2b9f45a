/// \file
/// gradcheck: compares the Jacobian computed by backward with central finite differences.
/// Use float64 inputs; the function must be deterministic (reseed any Generator inside it).
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <strata/autograd/backward.hpp>  // backward
#include <strata/tensor/factory.hpp>     // zeros

namespace strata {

/// What gradcheck found.
struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  ///< the worst mismatch, when !ok
};

/// Checks d fn(inputs) / d inputs against central differences with step `eps`; an entry
/// passes if |analytic - numeric| <= atol + rtol * |numeric|.
///
/// @code
/// auto x = strata::uniform({3, 4}, -1, 1, gen, strata::DType::f64).requires_grad_();
/// auto r = strata::gradcheck([](const std::vector<strata::Tensor>& in) { return strata::tanh(in[0]); }, {x});
/// assert(r.ok);
/// @endcode
inline GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                 const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                                 double rtol = 1e-3) {
  for (const Tensor& x : inputs)
    STRATA_CHECK(x.dtype() == DType::f64 && x.requires_grad() && x.is_leaf() && x.is_contiguous(),
                 "gradcheck: inputs must be contiguous float64 leaves that require gradients");
  Tensor y0;
  {
    NoGradGuard ng;
    y0 = fn(inputs);
  }
  const std::int64_t m = y0.numel();
  // analytic[k][j * n_k + i] = d y_j / d x_k[i]
  std::vector<std::vector<double>> analytic(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k)
    analytic[k].assign(static_cast<std::size_t>(m * inputs[k].numel()), 0.0);
  for (std::int64_t j = 0; j < m; ++j) {
    Tensor y = fn(inputs);
    if (!autograd::tracks_grad(y) || y.is_leaf()) break;  // y does not depend on the inputs: all zero
    Tensor seed = zeros(y.shape(), y.dtype());
    seed.data<double>()[j] = 1.0;
    const std::uint64_t epoch = backward(y, seed);
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k].impl()->ag.grad_epoch != epoch) continue;
      const Tensor grad = inputs[k].grad();  // a row-sparse gradient made dense
      if (!grad.defined()) continue;
      const double* g = grad.data<double>();
      for (std::int64_t i = 0; i < inputs[k].numel(); ++i)
        analytic[k][static_cast<std::size_t>(j * inputs[k].numel() + i)] = g[i];
    }
  }
  GradcheckResult res;
  NoGradGuard ng;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    double* x = inputs[k].data<double>();
    const std::int64_t n = inputs[k].numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double orig = x[i];
      x[i] = orig + eps;
      auto yp = fn(inputs).to_vector<double>();
      x[i] = orig - eps;
      auto ym = fn(inputs).to_vector<double>();
      x[i] = orig;
      for (std::int64_t j = 0; j < m; ++j) {
        const double num = (yp[static_cast<std::size_t>(j)] - ym[static_cast<std::size_t>(j)]) / (2 * eps);
        const double ana = analytic[k][static_cast<std::size_t>(j * n + i)];
        const double err = std::abs(ana - num);
        if (err > res.max_abs_error) res.max_abs_error = err;
        if (err > atol + rtol * std::abs(num) && res.ok) {
          res.ok = false;
          std::ostringstream os;
          os << "input " << k << " element " << i << ", output " << j << ": analytic " << ana << " vs numeric " << num;
          res.message = os.str();
        }
      }
    }
  }
  return res;
}

}  // namespace strata

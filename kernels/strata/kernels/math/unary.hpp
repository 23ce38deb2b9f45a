/// \file
/// The unary elementwise functions and their derivatives, written once for the CPU loop and
/// the CUDA kernel (STRATA_HOST_DEVICE): y = fwd(kind, x, s) and dy/dx = dydx(kind, x, y, s),
/// s being the scalar of the scalar forms (x + s, x * s, x ^ s).
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/config.hpp>  // STRATA_HOST_DEVICE

namespace strata::kernels::math {

/// The unary functions, as the integer an autograd node stores.
struct Unary {
  enum Kind : std::int64_t { neg, relu, exp, log, tanh, sigmoid, add_scalar, mul_scalar, pow_scalar, gelu };
};

template <class T>
STRATA_HOST_DEVICE T unary_fwd(std::int64_t k, T x, T s) noexcept {
  switch (k) {
    case Unary::neg: return -x;
    case Unary::relu: return x > T(0) ? x : T(0);
    case Unary::exp: return std::exp(x);
    case Unary::log: return std::log(x);
    case Unary::tanh: return std::tanh(x);
    case Unary::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Unary::add_scalar: return x + s;
    case Unary::mul_scalar: return x * s;
    case Unary::pow_scalar: return std::pow(x, s);
    case Unary::gelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));  // exact (erf) form
  }
  return x;
}

template <class T>
STRATA_HOST_DEVICE T unary_dydx(std::int64_t k, T x, T y, T s) noexcept {
  switch (k) {
    case Unary::neg: return T(-1);
    case Unary::relu: return y > T(0) ? T(1) : T(0);
    case Unary::exp: return y;
    case Unary::log: return T(1) / x;
    case Unary::tanh: return T(1) - y * y;
    case Unary::sigmoid: return y * (T(1) - y);
    case Unary::add_scalar: return T(1);
    case Unary::mul_scalar: return s;
    case Unary::pow_scalar: return s * std::pow(x, s - T(1));
    case Unary::gelu:  // Phi(x) + x phi(x)
      return T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440))) +
             x * T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
  }
  return T(0);
}

}  // namespace strata::kernels::math

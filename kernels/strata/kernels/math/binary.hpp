/// \file
/// The binary arithmetic operators and their partial derivatives, for the CPU loop and the
/// CUDA kernel alike: out = binary(kind, a, b); d out/da * g = binary_grad_a(kind, g, b);
/// d out/db * g = binary_grad_b(kind, g, a, b).
#pragma once

#include <cstdint>

#include <strata/config.hpp>  // STRATA_HOST_DEVICE

namespace strata::kernels::math {

enum class BinaryKind : std::int64_t { add, sub, mul, div };

template <class T>
STRATA_HOST_DEVICE T binary(BinaryKind k, T a, T b) noexcept {
  switch (k) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
  }
  return a;
}

template <class T>
STRATA_HOST_DEVICE T binary_grad_a(BinaryKind k, T g, T b) noexcept {
  switch (k) {
    case BinaryKind::add:
    case BinaryKind::sub: return g;
    case BinaryKind::mul: return g * b;
    case BinaryKind::div: return g / b;
  }
  return T(0);
}

template <class T>
STRATA_HOST_DEVICE T binary_grad_b(BinaryKind k, T g, T a, T b) noexcept {
  switch (k) {
    case BinaryKind::add: return g;
    case BinaryKind::sub: return -g;
    case BinaryKind::mul: return g * a;
    case BinaryKind::div: return -g * a / (b * b);
  }
  return T(0);
}

}  // namespace strata::kernels::math

/// \file
/// 16-bit floating-point storage types: Half (IEEE binary16) and BFloat16. They only store;
/// arithmetic converts to float (round to nearest even on the way back).
#pragma once

#include <cstdint>

#include <strata/kernels/math/bfloat16.hpp>  // bf16_bits, bf16_float
#include <strata/kernels/math/float16.hpp>  // f16_bits, f16_float
#include <strata/tensor/dtype.hpp>  // dtype_of

namespace strata {

/// bfloat16: the upper half of a float32 (rounded to nearest even, kernels/math/bfloat16.hpp).
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) noexcept : bits(kernels::math::bf16_bits(f)) {}
  explicit operator float() const noexcept { return kernels::math::bf16_float(bits); }
};

/// IEEE 754 binary16 (rounded to nearest even, kernels/math/float16.hpp).
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) noexcept : bits(kernels::math::f16_bits(f)) {}
  explicit operator float() const noexcept { return kernels::math::f16_float(bits); }
};

template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };

}  // namespace strata

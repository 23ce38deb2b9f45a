/// \file
/// 16-bit floating-point storage types: Half (IEEE binary16) and BFloat16. They only store;
/// arithmetic converts to float (round to nearest even on the way back).
#pragma once

#include <cstdint>
#include <cstring>  // std::memcpy

#include <strata/kernels/math/bfloat16.hpp>  // bf16_bits, bf16_float
#include <strata/tensor/dtype.hpp>  // dtype_of

namespace strata {

namespace detail {
inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

/// bfloat16: the upper half of a float32 (rounded to nearest even, kernels/math/bfloat16.hpp).
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) noexcept : bits(kernels::math::bf16_bits(f)) {}
  explicit operator float() const noexcept { return kernels::math::bf16_float(bits); }
};

/// IEEE 754 binary16.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) noexcept {
    const std::uint32_t u = detail::float_bits(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {  // inf or NaN
      bits = static_cast<std::uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    } else if (a >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
      bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    } else if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
      // Adding 0.5 shifts the significand into place with the FPU's round-to-nearest-even.
      const float sub = detail::bits_float(a) + 0.5f;
      bits = static_cast<std::uint16_t>(sign | (detail::float_bits(sub) - 0x3f000000u));
    } else {
      const std::uint32_t odd = (a >> 13) & 1u;
      bits = static_cast<std::uint16_t>(sign | ((a + 0xc8000fffu + odd) >> 13));
    }
  }
  explicit operator float() const noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man * 2^-24
      const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
      return detail::bits_float(detail::float_bits(f) | sign);
    }
    if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (man << 13));
    return detail::bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  }
};

template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };

}  // namespace strata

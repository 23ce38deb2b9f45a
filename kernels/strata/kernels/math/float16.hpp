/// \file
/// float <-> IEEE binary16 by bits, the one scalar conversion the kernels and the tensor layer's
/// Half share: to nearest, ties to even; past 65504 (from 65520 on) to infinity, a NaN stays a
/// quiet NaN, results below float16's smallest normal (6.1e-5) are its subnormals.
#pragma once

#include <cstdint>
#include <cstring>  // std::memcpy

namespace strata::kernels::math {

/// The float16 nearest f (ties to even), as its 16 bits.
inline std::uint16_t f16_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u)  // inf or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Adding 0.5 shifts the significand into place with the FPU's round-to-nearest-even.
    float sub;
    std::memcpy(&sub, &a, 4);
    sub += 0.5f;
    std::uint32_t s;
    std::memcpy(&s, &sub, 4);
    return static_cast<std::uint16_t>(sign | (s - 0x3f000000u));
  }
  const std::uint32_t odd = (a >> 13) & 1u;
  return static_cast<std::uint16_t>(sign | ((a + 0xc8000fffu + odd) >> 13));
}

/// The float a float16's bits stand for (exact).
inline float f16_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f rounded to the nearest float16, as a float (infinite past float16's range).
inline float round_to_f16(float f) noexcept { return f16_float(f16_bits(f)); }

}  // namespace strata::kernels::math

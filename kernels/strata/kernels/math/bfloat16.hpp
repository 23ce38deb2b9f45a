/// \file
/// float <-> bfloat16 by bits, the one scalar conversion the kernels and the tensor layer's
/// BFloat16 share: to nearest, ties to even; a NaN stays a quiet NaN, subnormals are kept
/// (the AVX512-BF16 conversion instructions flush them to zero instead).
#pragma once

#include <cstdint>
#include <cstring>  // std::memcpy

namespace strata::kernels::math {

/// The bfloat16 nearest f (ties to even), as its 16 bits.
inline std::uint16_t bf16_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// The float a bfloat16's bits stand for (exact).
inline float bf16_float(std::uint16_t bits) noexcept {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f rounded to the nearest bfloat16, as a float.
inline float round_to_bf16(float f) noexcept { return bf16_float(bf16_bits(f)); }

}  // namespace strata::kernels::math

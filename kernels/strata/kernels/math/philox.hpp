/// \file
/// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
/// SC'11): a counter-based generator. Four 32-bit words are a pure function of a 128-bit
/// counter and a 64-bit key, so any element of a random stream is computed on its own, on
/// either device, in any order — what dropout keyed by (seed, step, example, feature) needs.
/// The output matches Random123's known answers (tests/kernels/test_philox.cpp).
#pragma once

#include <cstdint>

#include <strata/config.hpp>  // STRATA_HOST_DEVICE

namespace strata::kernels::math {

struct Philox4x32 {
  std::uint32_t v[4];
};

/// The 10-round Philox4x32 of `counter` under `key`.
STRATA_HOST_DEVICE Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0, std::uint32_t k1) noexcept {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c.v[2];
    c = Philox4x32{{static_cast<std::uint32_t>(p1 >> 32) ^ c.v[1] ^ k0, static_cast<std::uint32_t>(p1),
                    static_cast<std::uint32_t>(p0 >> 32) ^ c.v[3] ^ k1, static_cast<std::uint32_t>(p0)}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

}  // namespace strata::kernels::math

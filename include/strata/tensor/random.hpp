/// \file
/// Generator: a seeded xoshiro256** stream. Its output is defined by this code alone (not
/// by a standard library's distributions), so the same seed gives the same numbers on every
/// platform and compiler.
#pragma once

#include <array>

#include <cmath>
#include <cstdint>

namespace strata {

/// A seeded pseudo-random stream.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) noexcept { reseed(seed); }

  void reseed(std::uint64_t seed) noexcept {
    std::uint64_t x = seed;
    for (auto& w : s_) w = splitmix64(x);
  }

  /// The four words of the state (for checkpoints), and back.
  std::array<std::uint64_t, 4> state() const noexcept { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<std::uint64_t, 4>& st) noexcept {
    for (std::size_t i = 0; i < 4; ++i) s_[i] = st[i];
  }

  /// 64 uniformly random bits.
  std::uint64_t next() noexcept {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Standard normal (Box-Muller; one value per call, the pair's partner is discarded).
  double normal() noexcept {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n <= 1) return 0;
    __extension__ using u128 = unsigned __int128;
    u128 m = static_cast<u128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<u128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  /// A seed derived from this seed and a stream number (per epoch, per replica, ...).
  static std::uint64_t derive(std::uint64_t seed, std::uint64_t stream) noexcept {
    std::uint64_t x = seed ^ (stream * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL);
    return splitmix64(x);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace strata

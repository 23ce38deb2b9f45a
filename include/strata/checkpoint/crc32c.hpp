/// \file
/// CRC-32C (Castagnoli), the checksum of every checkpoint section: the SSE4.2 crc32
/// instruction where the CPU has it (checked once at run time), else a slicing-by-8 table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define STRATA_CRC32C_X86 1
#else
#define STRATA_CRC32C_X86 0
#endif

namespace strata::checkpoint {

namespace detail {

constexpr std::uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kCrc32cPoly & (0u - (c & 1u)));
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}
inline constexpr auto kCrc32cTables = make_crc32c_tables();

/// The table-driven update of the raw (pre-inverted) state.
inline std::uint32_t crc32c_table(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = kCrc32cTables;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (checked where files are read)
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if STRATA_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(std::uint32_t c, const unsigned char* p,
                                                                     std::size_t n) {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c64);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
inline bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace detail

/// CRC-32C of `n` bytes, continuing from `crc` (the value of the bytes before; 0 to start).
inline std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
#if STRATA_CRC32C_X86
  if (detail::have_sse42()) return ~detail::crc32c_sse42(c, p, n);
#endif
  return ~detail::crc32c_table(c, p, n);
}

/// The portable table path alone (tests hold the two against each other).
inline std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0) {
  return ~detail::crc32c_table(~crc, static_cast<const unsigned char*>(data), n);
}

/// The CRC-32C of A followed by B, from crc(A), crc(B) and B's length: the whole-file CRC of
/// a file written piece by piece, from the CRCs its index already holds, without reading the
/// bytes again (zlib's crc32_combine: appending n zero bits is a linear map over GF(2),
/// squared up from one zero bit).
inline std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) {
  if (bytes_b == 0) return crc_a;
  auto times = [](const std::uint32_t* m, std::uint32_t v) {
    std::uint32_t sum = 0;
    for (int i = 0; v; v >>= 1, ++i)
      if (v & 1) sum ^= m[i];
    return sum;
  };
  auto square = [&](std::uint32_t* sq, const std::uint32_t* m) {
    for (int n = 0; n < 32; ++n) sq[n] = times(m, m[n]);
  };
  std::uint32_t odd[32], even[32];
  odd[0] = 0x82F63B78u;  // one zero bit: the reflected polynomial
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  square(even, odd);  // two zero bits
  square(odd, even);  // four
  do {  // the first square gives one zero byte
    square(even, odd);
    if (bytes_b & 1) crc_a = times(even, crc_a);
    bytes_b >>= 1;
    if (!bytes_b) break;
    square(odd, even);
    if (bytes_b & 1) crc_a = times(odd, crc_a);
    bytes_b >>= 1;
  } while (bytes_b);
  return crc_a ^ crc_b;
}

}  // namespace strata::checkpoint

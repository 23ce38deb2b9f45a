/// \file
/// The job token's cryptography, from OpenSSL's libcrypto: SHA-256, HMAC-SHA256, a comparison
/// that takes the same time wherever the inputs differ, and random bytes. A process proves it
/// holds the token by a MAC over fresh nonces, so the token itself never crosses the wire.
/// A build without libcrypto (`-Dcrypto`, Debian's libssl-dev) has no authenticated
/// rendezvous: every function here but `to_hex` then throws `[strata.crypto.missing]`, so a
/// job that needs the proof says why it cannot run rather than run unauthenticated.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <strata/config.hpp>

#if STRATA_HAS_CRYPTO
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

#include <strata/support/error.hpp>

namespace strata::support {

using Digest = std::array<std::uint8_t, 32>;

namespace crypto_detail {
#if STRATA_HAS_CRYPTO
/// Throws naming the libcrypto call that failed and the library's own reason.
[[noreturn]] inline void fail(const char* call) {
  char why[256] = "no reason given";
  if (const unsigned long e = ::ERR_get_error()) ::ERR_error_string_n(e, why, sizeof why);
  STRATA_THROW(::strata::error, "strata.crypto", call, " failed: ", why);
}
#else
[[noreturn]] inline void missing(const char* what) {
  STRATA_THROW(::strata::error, "strata.crypto.missing", what,
               " needs OpenSSL's libcrypto, which this build was made without: the job token's proof "
               "(authenticated rendezvous) is not available. Install libssl-dev and build with -Dcrypto=enabled "
               "(by hand: -DSTRATA_HAS_CRYPTO=1 -lcrypto)");
}
#endif
}  // namespace crypto_detail

/// Throws `[strata.crypto.missing]` naming `what` in a build without libcrypto: called where a
/// component that needs the proofs starts (the TCP store, Gloo's mesh), in the caller's thread.
inline void require_crypto([[maybe_unused]] const char* what) {
#if !STRATA_HAS_CRYPTO
  crypto_detail::missing(what);
#endif
}

/// SHA-256 (FIPS 180-4) of `s`.
inline Digest sha256(std::string_view s) {
#if STRATA_HAS_CRYPTO
  Digest out{};
  unsigned int n = 0;
  if (::EVP_Digest(s.data(), s.size(), out.data(), &n, ::EVP_sha256(), nullptr) != 1 || n != out.size())
    crypto_detail::fail("EVP_Digest(SHA-256)");
  return out;
#else
  (void)s;
  crypto_detail::missing("SHA-256");
#endif
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
inline Digest hmac_sha256(std::string_view key, std::string_view message) {
#if STRATA_HAS_CRYPTO
  Digest out{};
  unsigned int n = 0;
  // An empty key's data() may be null, which HMAC reads as "reuse the last key".
  static const unsigned char none = 0;
  const void* k = key.empty() ? &none : static_cast<const void*>(key.data());
  if (::HMAC(::EVP_sha256(), k, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
             message.size(), out.data(), &n) == nullptr ||
      n != out.size())
    crypto_detail::fail("HMAC(SHA-256)");
  return out;
#else
  (void)key, (void)message;
  crypto_detail::missing("HMAC-SHA256");
#endif
}

/// a == b, in a time that does not depend on where they differ (a MAC check must not tell an
/// attacker how many leading bytes it got right).
inline bool equal_in_constant_time(const void* a, const void* b, std::size_t n) {
#if STRATA_HAS_CRYPTO
  return ::CRYPTO_memcmp(a, b, n) == 0;
#else
  (void)a, (void)b, (void)n;
  crypto_detail::missing("A constant-time MAC comparison");
#endif
}

/// `n` bytes from libcrypto's random generator (seeded by the kernel).
inline std::string random_bytes(std::size_t n) {
#if STRATA_HAS_CRYPTO
  std::string out(n, '\0');
  if (n && ::RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    crypto_detail::fail("RAND_bytes");
  return out;
#else
  (void)n;
  crypto_detail::missing("Random bytes for the job token and its nonces");
#endif
}

/// Lower-case hex of `bytes`.
inline std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}
inline std::string to_hex(const Digest& d) { return to_hex(std::string_view(reinterpret_cast<const char*>(d.data()), d.size())); }

}  // namespace strata::support

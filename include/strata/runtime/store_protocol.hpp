/// \file
/// The TCP store's wire protocol: the handshake that admits only the job's own processes, and
/// the request frames after it. Pure functions over bytes (no sockets), so the server, the
/// client and the fuzzer share one parser.
///
/// Handshake (docs/launching.md, "Only the job gets in"):
///   server -> client  greeting: "STRATAST" | u32 version | u32 n | build fingerprint (n bytes) | nonce_s (32)
///   client -> server  answer:   "STRATAST" | u32 version | u32 n | build fingerprint (n bytes) | nonce_c (32)
///                               | HMAC-SHA256(token, "strata store client" | nonce_s | nonce_c)
///   server -> client  verdict:  'A' | HMAC-SHA256(token, "strata store server" | nonce_c | nonce_s)
///                            or 'R' | u32 n | reason (n bytes)
/// The token (STRATA_JOB_TOKEN) never crosses the wire; both sides prove they hold it, over
/// nonces fresh for each connection. Magic and version come first in every version of the
/// protocol, so a skewed peer is named ("wire protocol v3 vs v2") before anything else is read.
///
/// Requests, once admitted: op (1 byte) | u32 key length | key | u32 value length | value. An
/// elastic job's membership requests (J, W, P, E) use the same frame; their answer is a view
/// (membership.hpp).
/// Every length is checked against a bound before anything is allocated from it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/support/environment.hpp>
#include <strata/support/crypto.hpp>
#include <strata/tensor/dtype.hpp>
#include <strata/version.hpp>

/// The store's and the transports' wire protocol version; a build that changes any frame
/// layout raises it. (Overridable only so that a test can build a skewed peer.)
#ifndef STRATA_WIRE_VERSION
#define STRATA_WIRE_VERSION 2
#endif

namespace strata::runtime::store_protocol {

inline constexpr std::uint32_t kWireVersion = STRATA_WIRE_VERSION;
inline constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'T'};
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kMaxFingerprint = 512;
inline constexpr std::size_t kMaxReason = 1024;
inline constexpr std::size_t kMaxKey = 4096;
inline constexpr std::size_t kMaxValue = std::size_t(64) << 20;
/// The longest greeting or answer: nothing longer is buffered from a peer not yet admitted.
inline constexpr std::size_t kMaxHello = 16 + kMaxFingerprint + kNonceBytes + kMacBytes;

enum Op : std::uint8_t {
  kSet = 'S',
  kGet = 'G',
  kCheck = 'C',
  kClaim = 'X',
  // An elastic job's membership (membership.hpp): the key is the caller's member id.
  kJoin = 'J',   // value empty; answered by the first view that includes the caller
  kWait = 'W',   // value: u64 generation; answered by the first view after it
  kPoll = 'P',   // value: u64 generation; answered at once by the current view
  kEvict = 'E',  // value: u64 generation, then the id of the member that does not answer
};
inline bool is_op(std::uint8_t op) {
  for (Op o : {kSet, kGet, kCheck, kClaim, kJoin, kWait, kPoll, kEvict})
    if (op == o) return true;
  return false;
}

/// What a build must share with its peers to talk to them: the library version, the wire
/// version, and the element types the collectives move (a build with another DType list
/// would read another type from the same tag).
inline std::string build_fingerprint() {
  std::string s = std::string("strata ") + version_string + ", wire v" + std::to_string(kWireVersion) + ", dtypes";
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    s += std::string(" ") + std::to_string(static_cast<int>(t)) + "=" + name_of(t);
  return s;
}

/// What a process presents at the handshake.
struct Credentials {
  std::string token;  ///< the job token (STRATA_JOB_TOKEN); empty: none was given
  std::uint32_t version = kWireVersion;
  std::string fingerprint = build_fingerprint();

  /// The token from STRATA_JOB_TOKEN (strata-run sets it; with mpirun, export it with -x).
  static Credentials from_env() {
    Credentials c;
    if (const char* t = environment::get("STRATA_JOB_TOKEN")) {
      c.token = t;
      if (c.token.empty())
        STRATA_THROW(::strata::invalid_argument, "strata.runtime.tcp_store",
                     "STRATA_JOB_TOKEN is set but empty: unset it, or give the job's token");
    }
    return c;
  }
};

enum class Parsed { need_more, done, bad };

namespace detail {
inline void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline std::uint32_t get_u32(std::string_view s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)])) << (8 * i);
  return v;
}
/// The first bytes of `s`, printable, for naming what a stranger sent.
inline std::string show(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 16; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 32 && c < 127 && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return "'" + out + (s.size() > 16 ? "'..." : "'");
}
}  // namespace detail

inline support::Digest client_mac(std::string_view token, std::string_view nonce_s, std::string_view nonce_c) {
  return support::hmac_sha256(token, std::string("strata store client").append(nonce_s).append(nonce_c));
}
inline support::Digest server_mac(std::string_view token, std::string_view nonce_c, std::string_view nonce_s) {
  return support::hmac_sha256(token, std::string("strata store server").append(nonce_c).append(nonce_s));
}

/// A greeting (mac empty) or an answer (mac set).
struct Hello {
  std::uint32_t version = 0;
  std::string fingerprint, nonce, mac;
};

/// The server's greeting.
inline std::string encode_greeting(const Credentials& c, std::string_view nonce_s) {
  std::string s(kMagic, sizeof kMagic);
  detail::put_u32(s, c.version);
  detail::put_u32(s, static_cast<std::uint32_t>(c.fingerprint.size()));
  return s.append(c.fingerprint).append(nonce_s);
}
/// The client's answer to a greeting whose nonce is `nonce_s`.
inline std::string encode_answer(const Credentials& c, std::string_view nonce_s, std::string_view nonce_c) {
  std::string s = encode_greeting(c, nonce_c);
  const support::Digest mac = client_mac(c.token, nonce_s, nonce_c);
  return s.append(reinterpret_cast<const char*>(mac.data()), mac.size());
}

/// Parses a greeting (`with_mac` false) or an answer from the front of `in`. done: `out` is
/// filled and `used` bytes were consumed; a peer of another wire version is `done` as soon as
/// its version is read (out.version says which; the rest may be laid out otherwise). bad:
/// `why` names the fault.
inline Parsed parse_hello(std::string_view in, bool with_mac, Hello& out, std::size_t& used, std::string& why) {
  const std::size_t m = std::min(in.size(), sizeof kMagic);
  if (std::memcmp(in.data(), kMagic, m) != 0) {
    why = "not the strata store protocol (it sent " + detail::show(in) + ")";
    return Parsed::bad;
  }
  if (in.size() < 16) return Parsed::need_more;
  out.version = detail::get_u32(in, 8);
  if (out.version != kWireVersion) {
    used = 12;
    return Parsed::done;
  }
  const std::uint32_t n = detail::get_u32(in, 12);
  if (n > kMaxFingerprint) {
    why = "a build fingerprint of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxFingerprint) + ")";
    return Parsed::bad;
  }
  const std::size_t total = 16 + n + kNonceBytes + (with_mac ? kMacBytes : 0);
  if (in.size() < total) return Parsed::need_more;
  out.fingerprint.assign(in.substr(16, n));
  out.nonce.assign(in.substr(16 + n, kNonceBytes));
  out.mac = with_mac ? std::string(in.substr(16 + n + kNonceBytes, kMacBytes)) : std::string();
  used = total;
  return Parsed::done;
}

/// The server's decision on an answer: empty when admitted, else the reason, which names
/// what differs.
inline std::string judge_answer(const Credentials& mine, std::string_view nonce_s, const Hello& answer) {
  if (answer.version != mine.version)
    return "wire protocol v" + std::to_string(answer.version) + " vs v" + std::to_string(mine.version) +
           " of this store: every process of the job must run the same strata build";
  if (answer.fingerprint != mine.fingerprint)
    return "build '" + answer.fingerprint + "' vs this store's '" + mine.fingerprint +
           "': every process of the job must run the same strata build";
  const support::Digest want = client_mac(mine.token, nonce_s, answer.nonce);
  if (answer.mac.size() != want.size() || !support::equal_in_constant_time(answer.mac.data(), want.data(), want.size()))
    return "wrong job token (its proof does not match this job's STRATA_JOB_TOKEN)";
  return {};
}

inline std::string encode_accept(const Credentials& mine, std::string_view nonce_c, std::string_view nonce_s) {
  const support::Digest mac = server_mac(mine.token, nonce_c, nonce_s);
  return std::string(1, 'A').append(reinterpret_cast<const char*>(mac.data()), mac.size());
}
inline std::string encode_refusal(std::string_view reason) {
  std::string s(1, 'R');
  const std::string_view r = reason.substr(0, kMaxReason);
  detail::put_u32(s, static_cast<std::uint32_t>(r.size()));
  return s.append(r);
}

/// The server's verdict, read by the client: accepted with the server's proof in `text`, or
/// refused with the reason in `text`.
inline Parsed parse_verdict(std::string_view in, bool& accepted, std::string& text, std::size_t& used, std::string& why) {
  if (in.empty()) return Parsed::need_more;
  if (in[0] == 'A') {
    if (in.size() < 1 + kMacBytes) return Parsed::need_more;
    accepted = true;
    text.assign(in.substr(1, kMacBytes));
    used = 1 + kMacBytes;
    return Parsed::done;
  }
  if (in[0] != 'R') {
    why = "a verdict that is neither accept nor refuse (it sent " + detail::show(in) + ")";
    return Parsed::bad;
  }
  if (in.size() < 5) return Parsed::need_more;
  const std::uint32_t n = detail::get_u32(in, 1);
  if (n > kMaxReason) {
    why = "a refusal of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxReason) + ")";
    return Parsed::bad;
  }
  if (in.size() < 5 + n) return Parsed::need_more;
  accepted = false;
  text.assign(in.substr(5, n));
  used = 5 + n;
  return Parsed::done;
}

/// One request of an admitted client.
struct Request {
  Op op = kGet;
  std::string key;
  std::vector<char> value;
};

inline std::string encode_request(Op op, std::string_view key, const std::vector<char>& value = {}) {
  std::string s(1, static_cast<char>(op));
  detail::put_u32(s, static_cast<std::uint32_t>(key.size()));
  s.append(key);
  detail::put_u32(s, static_cast<std::uint32_t>(value.size()));
  return s.append(value.data(), value.size());
}

/// Parses one request from the front of `in`; lengths are checked against kMaxKey and
/// kMaxValue as soon as they are read, before the bytes they announce arrive.
inline Parsed parse_request(std::string_view in, Request& out, std::size_t& used, std::string& why) {
  if (in.empty()) return Parsed::need_more;
  const auto op = static_cast<std::uint8_t>(in[0]);
  if (!is_op(op)) {
    why = "an unknown request " + detail::show(in.substr(0, 1));
    return Parsed::bad;
  }
  if (in.size() < 5) return Parsed::need_more;
  const std::uint32_t k = detail::get_u32(in, 1);
  if (k > kMaxKey) {
    why = "a key of " + std::to_string(k) + " bytes (at most " + std::to_string(kMaxKey) + ")";
    return Parsed::bad;
  }
  if (in.size() < 9 + std::size_t(k)) return Parsed::need_more;
  const std::uint32_t v = detail::get_u32(in, 5 + k);
  if (v > kMaxValue) {
    why = "a value of " + std::to_string(v) + " bytes (at most " + std::to_string(kMaxValue) + ")";
    return Parsed::bad;
  }
  const std::size_t total = 9 + std::size_t(k) + v;
  if (in.size() < total) return Parsed::need_more;
  out.op = static_cast<Op>(op);
  out.key.assign(in.substr(5, k));
  out.value.assign(in.data() + 9 + k, in.data() + total);
  used = total;
  return Parsed::done;
}

}  // namespace strata::runtime::store_protocol

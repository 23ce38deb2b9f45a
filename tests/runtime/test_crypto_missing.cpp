// A build without libcrypto (-Dcrypto=disabled) has no authenticated rendezvous, and says so
// by name where it is asked for one: this program is compiled without STRATA_HAS_CRYPTO.
#include "doctest.hpp"

#include <string>

#include <strata/runtime/tcp_store.hpp>
#include <strata/support/crypto.hpp>

#if STRATA_HAS_CRYPTO
#error "this test is built without libcrypto"
#endif

namespace {
// Runs f, which must throw a strata::error naming the missing library and the option that adds it.
template <class F>
void expect_missing(F&& f, const std::string& what) {
  std::string message;
  try {
    f();
  } catch (const strata::error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("[strata.crypto.missing]") != std::string::npos);
  CHECK(message.find(what) != std::string::npos);
  CHECK(message.find("libcrypto") != std::string::npos);
  CHECK(message.find("-Dcrypto=enabled") != std::string::npos);
}
}  // namespace

TEST_CASE("Support.Crypto.MissingIsNamedNeverWeaker") {
  expect_missing([] { (void)strata::support::sha256("abc"); }, "SHA-256");
  expect_missing([] { (void)strata::support::hmac_sha256("token", "message"); }, "HMAC-SHA256");
  expect_missing([] { (void)strata::support::random_bytes(32); }, "Random bytes");
  expect_missing([] { (void)strata::support::equal_in_constant_time("a", "a", 1); }, "constant-time");
  CHECK(strata::support::to_hex(std::string("\x01\xab", 2)) == "01ab");
}

TEST_CASE("Support.Crypto.MissingStopsTheTcpStoreInTheCallersThread") {
  // Neither the server nor a client starts: the error reaches the caller before any socket.
  strata::runtime::store_protocol::Credentials creds;
  creds.token = "a token";
  expect_missing([&] { strata::runtime::TcpStore store("127.0.0.1", 1, true, std::chrono::milliseconds(100), creds); },
                 "TCP store");
  expect_missing([&] { strata::runtime::TcpStore store("127.0.0.1", 1, false, std::chrono::milliseconds(100), creds); },
                 "TCP store");
}

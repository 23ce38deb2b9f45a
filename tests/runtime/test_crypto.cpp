// SHA-256 against the FIPS 180-4 examples and HMAC-SHA256 against RFC 4231's test cases, as
// libcrypto computes them behind support/crypto.hpp.
#include "doctest.hpp"

#include <string>

#include <strata/support/crypto.hpp>

using strata::support::hmac_sha256;
using strata::support::sha256;
using strata::support::to_hex;

namespace {
std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}
}  // namespace

TEST_CASE("Support.Crypto.Fips180Examples") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a': sixteen thousand blocks and a padding block.
  CHECK(to_hex(sha256(std::string(1000000, 'a'))) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("Support.Crypto.HmacRfc4231") {
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(to_hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(to_hex(hmac_sha256(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // The empty key of a job without STRATA_JOB_TOKEN.
  CHECK(to_hex(hmac_sha256("", "")) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  // A key longer than the block is hashed first (case 6).
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("Support.Crypto.ConstantTimeEqualAndRandom") {
  const std::string a = "0123456789", b = "0123456789", c = "0123456780";
  CHECK(strata::support::equal_in_constant_time(a.data(), b.data(), a.size()));
  CHECK_FALSE(strata::support::equal_in_constant_time(a.data(), c.data(), a.size()));
  const std::string r1 = strata::support::random_bytes(32), r2 = strata::support::random_bytes(32);
  CHECK(r1.size() == 32);
  CHECK(r1 != r2);  // a collision of 256 random bits does not happen
}

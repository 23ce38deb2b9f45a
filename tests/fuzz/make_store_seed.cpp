// Writes valid store-protocol exchanges into DIR, the seed corpus of fuzz_store_protocol.
#include <cstdio>
#include <string>

#include <strata/runtime/membership.hpp>
#include <strata/runtime/store_protocol.hpp>

namespace proto = strata::runtime::store_protocol;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  proto::Credentials c;
  c.token = "fuzz-token";
  const std::string nonce(proto::kNonceBytes, 'n');
  const std::string seeds[] = {
      proto::encode_answer(c, nonce, nonce) + proto::encode_request(proto::kSet, "world/0", {'a', 'b'}) +
          proto::encode_request(proto::kGet, "world/1"),
      proto::encode_answer(c, nonce, nonce) + proto::encode_request(proto::kClaim, "strata.claim/world/0", {'h'}),
      proto::encode_greeting(c, nonce) + proto::encode_accept(c, nonce, nonce),
      proto::encode_greeting(c, nonce) + proto::encode_refusal("wrong job token"),
      proto::encode_request(proto::kCheck, "k"),
      proto::encode_answer(c, nonce, nonce) + proto::encode_request(proto::kJoin, "host:1") +
          proto::encode_request(proto::kWait, "host:1", {1, 0, 0, 0, 0, 0, 0, 0}),
      strata::runtime::membership_wire::encode(strata::runtime::View{3, strata::runtime::View::State::member, {"host:1", "host:2"}}),
  };
  int i = 0;
  for (const std::string& s : seeds) {
    const std::string path = std::string(argv[1]) + "/seed" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fclose(f) != 0) return 1;
  }
  return 0;
}

// libFuzzer target for the TCP store's handshake and request parsers (store_protocol.hpp;
// RELIABILITY E2) and its membership views (membership.hpp): any bytes either parse into fields within their bounds and inside the
// input, ask for more, or are refused with a reason — never a crash, a leak, an allocation
// from a length the bytes claim, or an exception. Built by tests/fuzz/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <strata/runtime/membership.hpp>
#include <strata/runtime/store_protocol.hpp>

namespace proto = strata::runtime::store_protocol;

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static const proto::Credentials creds = [] {
    proto::Credentials c;
    c.token = "fuzz-token";
    return c;
  }();
  std::string why;
  std::size_t used = 0;

  // The store's side: the client's answer, judged, then the requests that follow it.
  proto::Hello answer;
  std::size_t at = 0;
  switch (proto::parse_hello(in, true, answer, used, why)) {
    case proto::Parsed::done:
      require(used <= size && used >= 12);
      if (answer.version == proto::kWireVersion)
        require(answer.fingerprint.size() <= proto::kMaxFingerprint && answer.nonce.size() == proto::kNonceBytes &&
                answer.mac.size() == proto::kMacBytes);
      require(!proto::judge_answer(creds, std::string(proto::kNonceBytes, 'n'), answer).empty() ||
              answer.version == proto::kWireVersion);
      at = used;
      break;
    case proto::Parsed::bad: require(!why.empty()); break;
    case proto::Parsed::need_more: require(size < proto::kMaxHello); break;
  }
  for (;;) {
    proto::Request req;
    const proto::Parsed p = proto::parse_request(in.substr(at), req, used, why);
    if (p == proto::Parsed::bad) require(!why.empty());
    if (p != proto::Parsed::done) break;
    require(used > 0 && at + used <= size && req.key.size() <= proto::kMaxKey && req.value.size() <= proto::kMaxValue);
    // What was parsed is what was sent: encoding it again gives the same bytes.
    require(proto::encode_request(req.op, req.key, req.value) == in.substr(at, used));
    at += used;
  }

  // The client's side: a greeting, then a verdict.
  proto::Hello greeting;
  if (proto::parse_hello(in, false, greeting, used, why) == proto::Parsed::done) {
    require(used <= size);
    bool accepted = false;
    std::string text;
    if (proto::parse_verdict(in.substr(used), accepted, text, used, why) == proto::Parsed::done)
      require(text.size() <= (accepted ? proto::kMacBytes : proto::kMaxReason));
  }
  // A membership view, as a worker reads it: whole and within bounds, or refused.
  strata::runtime::View view;
  if (strata::runtime::membership_wire::decode(in, view, why)) {
    require(view.members.size() <= strata::runtime::membership_wire::kMaxMembers);
    require(strata::runtime::membership_wire::encode(view) == in);
  }
  return 0;
}

// The TCP store admits only the job's processes (store_protocol.hpp): strangers with the wrong
// token, another build, garbage, huge lengths or idle connections are refused and counted, and
// the store goes on serving the job. Raw sockets play the strangers.
#include "doctest.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <strata/runtime/launcher.hpp>  // detail::free_port
#include <strata/runtime/tcp_store.hpp>

namespace proto = strata::runtime::store_protocol;
using strata::runtime::TcpStore;
using namespace std::chrono_literals;

namespace {
proto::Credentials creds(const std::string& token) {
  proto::Credentials c;
  c.token = token;
  return c;
}

/// A raw connection to 127.0.0.1:port.
int dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}
/// Everything the peer sends until it closes (or `wait` passes).
std::string drain(int fd, std::chrono::milliseconds wait = 3000ms) {
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (strata::runtime::tcp_store_detail::read_some(fd, in, deadline)) {
  }
  return in;
}
/// The greeting a raw connection receives, parsed.
proto::Hello greeting_of(int fd, std::string& rest) {
  proto::Hello g;
  std::size_t used = 0;
  std::string why;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (proto::parse_hello(rest, false, g, used, why) == proto::Parsed::need_more)
    REQUIRE(strata::runtime::tcp_store_detail::read_some(fd, rest, deadline));
  rest.erase(0, used);
  return g;
}
/// The reason of the refusal at the front of `in`.
std::string reason_in(const std::string& in) {
  std::string why, text;
  std::size_t used = 0;
  bool accepted = true;
  if (proto::parse_verdict(in, accepted, text, used, why) != proto::Parsed::done || accepted) return "(no refusal)";
  return text;
}
/// The refusal text in what a refused connection received after its greeting.
std::string refusal_in(const std::string& received) {
  std::string why;
  proto::Hello g;
  std::size_t used = 0;
  if (proto::parse_hello(received, false, g, used, why) != proto::Parsed::done) return "(no greeting)";
  return reason_in(received.substr(used));
}
void send_all(int fd, const std::string& s) { REQUIRE(strata::runtime::tcp_store_detail::write_all(fd, s)); }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const strata::error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The job's store, its own client still served: a set and a get round trip.
void still_serves(TcpStore& job, const std::string& key) {
  job.set(key, {'o', 'k'});
  CHECK(job.get(key, 2s) == std::vector<char>{'o', 'k'});
}
}  // namespace

TEST_CASE("Runtime.TcpStore.AdmitsTheJobAndServesIt") {
  const int port = strata::runtime::detail::free_port();
  TcpStore rank0("127.0.0.1", port, true, 5000ms, creds("job-token"));
  TcpStore rank1("127.0.0.1", port, false, 5000ms, creds("job-token"));
  rank0.set("a", {'1', '2'});
  CHECK(rank1.get("a", 2s) == std::vector<char>{'1', '2'});
  CHECK(rank1.check("a"));
  CHECK_FALSE(rank1.check("b"));
  CHECK(rank1.claim("c", "first").empty());
  CHECK(rank0.claim("c", "second") == "first");
  // A get waits for a set from another client.
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    rank0.set("late", {'x'});
  });
  CHECK(rank1.get("late", 3s) == std::vector<char>{'x'});
  later.join();
  CHECK(rank0.server()->refused() == 0);
}

TEST_CASE("Runtime.TcpStore.RefusesAndNamesStrangers") {
  const int port = strata::runtime::detail::free_port();
  TcpStore job("127.0.0.1", port, true, 5000ms, creds("job-token"));
  still_serves(job, "before");
  std::size_t refused = 0;

  SUBCASE("a client with the wrong token") {
    TcpStore other("127.0.0.1", port, false, 2000ms, creds("another-token"));
    const std::string e = error_of([&] { other.set("k", {'1'}); });
    CHECK(e.find("refused this process: wrong job token") != std::string::npos);
    refused = 1;
  }
  SUBCASE("a client without a token") {
    TcpStore other("127.0.0.1", port, false, 2000ms, creds(""));
    CHECK(error_of([&] { other.check("k"); }).find("wrong job token") != std::string::npos);
    refused = 1;
  }
  SUBCASE("a client of another wire version: both sides name both versions") {
    proto::Credentials c = creds("job-token");
    c.version = proto::kWireVersion + 1;
    TcpStore other("127.0.0.1", port, false, 2000ms, c);
    const std::string e = error_of([&] { other.check("k"); });
    CHECK(e.find("speaks wire protocol v" + std::to_string(proto::kWireVersion) + ", this process v" +
                 std::to_string(proto::kWireVersion + 1)) != std::string::npos);
    refused = 1;
    // The store's side: a raw client of the other version reads the store's reason.
    const int fd = dial(port);
    std::string rest;
    const proto::Hello g = greeting_of(fd, rest);
    send_all(fd, proto::encode_answer(c, g.nonce, std::string(32, 'n')));
    CHECK(reason_in(rest + drain(fd)).find("wire protocol v" + std::to_string(proto::kWireVersion + 1) + " vs v" +
                    std::to_string(proto::kWireVersion)) != std::string::npos);
    ::close(fd);
    refused = 2;
  }
  SUBCASE("a client of another build") {
    proto::Credentials c = creds("job-token");
    c.fingerprint = "strata 9.9.9, wire v2, dtypes 0=f32";
    TcpStore other("127.0.0.1", port, false, 2000ms, c);
    const std::string e = error_of([&] { other.check("k"); });
    CHECK(e.find("build 'strata 9.9.9") != std::string::npos);
    CHECK(e.find(proto::build_fingerprint()) != std::string::npos);
    refused = 1;
  }
  SUBCASE("garbage bytes") {
    const int fd = dial(port);
    send_all(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(refusal_in(drain(fd)).find("not the strata store protocol (it sent 'GET / HTTP/1.1") != std::string::npos);
    ::close(fd);
    refused = 1;
  }
  SUBCASE("a 4 GiB length in the handshake") {
    const int fd = dial(port);
    std::string hello(proto::kMagic, 8);
    proto::detail::put_u32(hello, proto::kWireVersion);
    proto::detail::put_u32(hello, 0xffffffffu);
    send_all(fd, hello);
    CHECK(refusal_in(drain(fd)).find("a build fingerprint of 4294967295 bytes") != std::string::npos);
    ::close(fd);
    refused = 1;
  }
  SUBCASE("the magic, then noise: the noise is read as a wire version and named") {
    const int fd = dial(port);
    send_all(fd, std::string(proto::kMagic, 8) + std::string(4096, 'z'));
    CHECK(refusal_in(drain(fd)).find("wire protocol v2054847098 vs v") != std::string::npos);
    ::close(fd);
    refused = 1;
  }
  SUBCASE("a forged proof: the right layout, a MAC under a guessed token") {
    const int fd = dial(port);
    std::string rest;
    const proto::Hello g = greeting_of(fd, rest);
    CHECK(g.fingerprint == proto::build_fingerprint());
    send_all(fd, proto::encode_answer(creds("guess"), g.nonce, std::string(32, 'n')));
    CHECK(reason_in(rest + drain(fd)).find("wrong job token") != std::string::npos);
    ::close(fd);
    refused = 1;
  }
  SUBCASE("a replayed answer: a proof is good for one nonce only") {
    const int fd1 = dial(port);
    std::string rest1;
    const proto::Hello g1 = greeting_of(fd1, rest1);
    const std::string answer = proto::encode_answer(creds("job-token"), g1.nonce, std::string(32, 'n'));
    send_all(fd1, answer);  // admitted
    const int fd2 = dial(port);
    std::string rest2;
    (void)greeting_of(fd2, rest2);
    send_all(fd2, answer);  // the same bytes, replayed on a new connection
    CHECK(reason_in(rest2 + drain(fd2)).find("wrong job token") != std::string::npos);
    ::close(fd1);
    ::close(fd2);
    refused = 1;
  }
  SUBCASE("an admitted client that claims a 4 GiB value is dropped") {
    const int fd = dial(port);
    std::string rest;
    const proto::Hello g = greeting_of(fd, rest);
    send_all(fd, proto::encode_answer(creds("job-token"), g.nonce, std::string(32, 'n')));
    std::string frame(1, 'S');
    proto::detail::put_u32(frame, 1);
    frame += 'k';
    proto::detail::put_u32(frame, 0xffffffffu);
    send_all(fd, frame);
    const std::string got = rest + drain(fd);
    CHECK(got.size() == 1 + proto::kMacBytes);  // the accept, then the connection closed, nothing else
    ::close(fd);
    refused = 1;  // counted as a refusal of the admitted client's frame
  }
  // The job goes on, and every stranger was counted.
  still_serves(job, "after");
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (job.server()->refused() < refused && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  CHECK(job.server()->refused() == refused);
}

TEST_CASE("Runtime.TcpStore.IdleAndSlowConnectionsDoNotStopTheJob") {
  const int port = strata::runtime::detail::free_port();
  TcpStore job("127.0.0.1", port, true, 5000ms, creds("job-token"));
  // 600 idle connections: at most kMaxWaiting of them are kept, the oldest evicted first,
  // and a process of the job still gets in.
  constexpr std::size_t kIdle = 600, kKept = strata::runtime::tcp_store_detail::Server::kMaxWaiting;
  std::vector<int> idle;
  for (std::size_t i = 0; i < kIdle; ++i) idle.push_back(dial(port));
  TcpStore late("127.0.0.1", port, false, 5000ms, creds("job-token"));
  late.set("during-flood", {'1'});
  CHECK(job.get("during-flood", 2s) == std::vector<char>{'1'});
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (job.server()->refused() < kIdle + 1 - kKept && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(job.server()->refused() == kIdle + 1 - kKept);  // the idle ones and `late`, less those kept
  CHECK(reason_in(drain(idle.front(), 1000ms).substr(16 + proto::build_fingerprint().size() + proto::kNonceBytes))
            .find("connections wait for the handshake; the oldest goes") != std::string::npos);
  for (int fd : idle) ::close(fd);
  // A stranger that sends half a handshake and stalls: the server reads without blocking,
  // and cuts it after kHandshakeTime, named as such.
  const int slow = dial(port);
  send_all(slow, std::string(proto::kMagic, 8));
  still_serves(job, "slow");
  CHECK(refusal_in(drain(slow, 8000ms)).find("no handshake within 5 s") != std::string::npos);
  ::close(slow);
  still_serves(job, "after");
}

TEST_CASE("Runtime.TcpStore.AClientRefusesAStoreWithoutTheToken") {
  // A listener that speaks the protocol but admits anyone with a proof it cannot make.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::thread impostor([lfd] {
    const int c = ::accept(lfd, nullptr, nullptr);
    send_all(c, proto::encode_greeting(creds("unknown"), std::string(32, 's')));
    std::string in;
    strata::runtime::tcp_store_detail::read_some(c, in, std::chrono::steady_clock::now() + 3s);
    send_all(c, proto::encode_accept(creds("unknown"), std::string(32, 'c'), std::string(32, 's')));
    drain(c, 3000ms);
    ::close(c);
  });
  TcpStore client("127.0.0.1", ntohs(a.sin_port), false, 3000ms, creds("job-token"));
  CHECK(error_of([&] { client.check("k"); }).find("without proving it holds this job's token") != std::string::npos);
  impostor.join();
  ::close(lfd);
}

TEST_CASE("Runtime.StoreProtocol.ParsersCheckEveryLength") {
  std::string why;
  std::size_t used = 0;
  proto::Request req;
  // A request is parsed only whole, its lengths checked before the bytes they announce.
  const std::string frame = proto::encode_request(proto::kSet, "key", {'v', 'a', 'l'});
  for (std::size_t n = 0; n < frame.size(); ++n)
    CHECK(proto::parse_request(std::string_view(frame).substr(0, n), req, used, why) == proto::Parsed::need_more);
  REQUIRE(proto::parse_request(frame + "tail", req, used, why) == proto::Parsed::done);
  CHECK(used == frame.size());
  CHECK(req.key == "key");
  CHECK(req.value == std::vector<char>{'v', 'a', 'l'});
  std::string big_key(1, 'G');
  proto::detail::put_u32(big_key, proto::kMaxKey + 1);
  CHECK(proto::parse_request(big_key, req, used, why) == proto::Parsed::bad);
  CHECK(why == "a key of 4097 bytes (at most 4096)");
  std::string big_value(1, 'S');
  proto::detail::put_u32(big_value, 0);
  proto::detail::put_u32(big_value, 0x80000000u);
  CHECK(proto::parse_request(big_value, req, used, why) == proto::Parsed::bad);
  CHECK(why.find("a value of 2147483648 bytes") == 0);
  CHECK(proto::parse_request("Q", req, used, why) == proto::Parsed::bad);
  // A verdict's reason is bounded too.
  bool accepted = false;
  std::string text, refusal(1, 'R');
  proto::detail::put_u32(refusal, proto::kMaxReason + 1);
  CHECK(proto::parse_verdict(refusal, accepted, text, used, why) == proto::Parsed::bad);
  CHECK(proto::parse_verdict(proto::encode_refusal("no"), accepted, text, used, why) == proto::Parsed::done);
  CHECK(text == "no");
  CHECK_FALSE(accepted);
}

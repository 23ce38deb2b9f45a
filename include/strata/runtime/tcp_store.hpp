/// \file
/// A key-value store over TCP for rendezvous without a shared directory (torchrun's TCPStore):
/// rank 0 serves it on STRATA_MASTER_ADDR:STRATA_MASTER_PORT (127.0.0.1 unless told
/// otherwise); every rank, rank 0 included, is a client. Keys are set once and read many
/// times; a read waits until the key is set or the deadline passes.
///
/// Only the job's processes get in: each connection starts with the handshake of
/// store_protocol.hpp (the job token proven by a MAC over fresh nonces, the wire version and
/// the build compared). A stranger — wrong token, another build, garbage, a huge length, a
/// flood of idle connections — is refused and named in rank 0's log, and costs the server no
/// more than a bounded buffer for at most 5 s.
///
/// One server and one client connection per process, shared by every communicator of the
/// job (their keys carry the communicator's prefix). The server thread sleeps in poll() and
/// never blocks on a peer that has not been admitted. Replies: get -> value length + value;
/// set -> 1 byte; check -> 1 byte (0 or 1); claim -> 1 byte (0: claimed; 1: taken) + the
/// holder's value.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <strata/runtime/membership.hpp>
#include <strata/runtime/store_protocol.hpp>
#include <strata/support/check.hpp>
#include <strata/support/crypto.hpp>
#include <strata/support/environment.hpp>
#include <strata/support/error.hpp>

namespace strata::runtime {

namespace tcp_store_detail {

namespace proto = store_protocol;
using Clock = std::chrono::steady_clock;

/// Writes all of `n` bytes; false if the peer is gone.
inline bool write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
inline bool write_all(int fd, const std::string& s) { return write_all(fd, s.data(), s.size()); }

/// Reads some bytes into `buf`, waiting at most until `deadline`; false on EOF, error or expiry.
inline bool read_some(int fd, std::string& buf, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    char chunk[4096];
    const ssize_t k = ::recv(fd, chunk, sizeof chunk, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    buf.append(chunk, static_cast<std::size_t>(k));
    return true;
  }
}

/// Reads exactly `n` bytes, waiting at most until `deadline`; false on EOF, error or expiry.
inline bool read_all(int fd, void* p, std::size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

inline sockaddr_in address(const std::string& host, int port, const char* what) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  if (::inet_pton(AF_INET, h.c_str(), &a.sin_addr) != 1)
    STRATA_THROW(::strata::invalid_argument, "strata.runtime.tcp_store", what, "STRATA_MASTER_ADDR=", host,
                 " is not an IPv4 address");
  return a;
}

/// "ip:port" of the peer of `fd`.
inline std::string peer_name(int fd) {
  sockaddr_in a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0 || a.sin_family != AF_INET) return "an unknown peer";
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

/// The store's server: one thread, poll() over the listening socket and the connections,
/// which it reads without blocking into a buffer each. A get of a key not yet set parks the
/// client until a set arrives.
class Server {
 public:
  /// At most this many connections wait for their handshake; a newer one evicts the oldest.
  static constexpr std::size_t kMaxWaiting = 128;
  static constexpr auto kHandshakeTime = std::chrono::seconds(5);

  /// Serves host:port; with `membership`, also an elastic job's membership (the store then
  /// outlives every worker: strata-run --elastic serves it).
  Server(const std::string& host, int port, proto::Credentials creds = proto::Credentials::from_env(),
         std::optional<MembershipOptions> membership = std::nullopt)
      : creds_(std::move(creds)), where_(host + ":" + std::to_string(port)) {
    support::require_crypto("The TCP store's handshake (its job-token proof)");
    if (membership) membership_.emplace(*membership);
    const sockaddr_in a = address(host, port, "TCP store: ");
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    STRATA_CHECK(listen_fd_ >= 0, "TCP store: socket: ", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // The system's largest accept queue: a burst of connections beyond it (every rank of a
    // large job at once) would have its SYNs dropped, and each retried a second later.
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, SOMAXCONN) != 0) {
      const int err = errno;
      ::close(listen_fd_);
      STRATA_THROW(::strata::invalid_argument, "strata.runtime.tcp_store", "rank 0 cannot serve the TCP store on ", host, ":",
                   port, " (STRATA_MASTER_ADDR:STRATA_MASTER_PORT): ", std::strerror(err),
                   err == EADDRINUSE ? "; the port is in use: pick another STRATA_MASTER_PORT" : "");
    }
    if (creds_.token.empty())
      std::fprintf(stderr,
                   "[strata.runtime.tcp_store] warning: STRATA_JOB_TOKEN is not set: the TCP store at %s admits any "
                   "process that runs this strata build. strata-run sets a token; under mpirun, export one to every "
                   "rank (docs/launching.md)\n",
                   where_.c_str());
    STRATA_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "TCP store: pipe: ", std::strerror(errno));
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, conn] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Connections refused so far (a wrong token, another build, bytes that are not the protocol,
  /// a handshake not finished in time).
  std::size_t refused() const noexcept { return refused_.load(); }
  /// Why the elastic job's membership ended ("" while it goes on, or without membership).
  std::string membership_end() const {
    std::lock_guard lock(end_m_);
    return end_;
  }

 private:
  struct Conn {
    std::string in, nonce, peer;
    bool admitted = false;
    Clock::time_point deadline;  // of the handshake
    std::uint64_t order = 0;     // of acceptance: the oldest waiting one is evicted first
  };

  void loop() {
    for (;;) {
      const auto now = Clock::now();
      const bool accepting = now >= accept_paused_until_;
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0}};
      Clock::time_point next = accepting ? Clock::time_point::max() : accept_paused_until_;
      for (auto& [fd, conn] : conns_) {
        fds.push_back({fd, POLLIN, 0});
        if (!conn.admitted) next = std::min(next, conn.deadline);
      }
      if (membership_)
        if (const auto d = membership_->deadline()) next = std::min(next, *d);
      const int wait = next == Clock::time_point::max()
                           ? -1
                           : static_cast<int>(std::max<long long>(
                                 0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      if (::poll(fds.data(), fds.size(), wait) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) accept_new();
      for (std::size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents && conns_.count(fds[i].fd)) on_readable(fds[i].fd);
      expire_handshakes();
      if (membership_ && membership_->settle(Clock::now())) publish();
    }
  }

  void accept_new() {
    for (int round = 0; round < 64; ++round) {
      const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop accepting for a moment rather than spin on the listener.
          accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
          refuse_note("new connections", std::string("cannot accept: ") + std::strerror(errno));
        }
        return;
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (waiting() >= kMaxWaiting) evict_oldest_waiting();
      Conn conn;
      conn.peer = peer_name(c);
      conn.nonce = support::random_bytes(proto::kNonceBytes);
      conn.deadline = Clock::now() + kHandshakeTime;
      conn.order = accepted_++;
      const std::string greeting = proto::encode_greeting(creds_, conn.nonce);
      if (::send(c, greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(greeting.size())) {
        ::close(c);
        continue;
      }
      conns_.emplace(c, std::move(conn));
    }
  }

  std::size_t waiting() const {
    std::size_t n = 0;
    for (const auto& [fd, conn] : conns_) n += conn.admitted ? 0 : 1;
    return n;
  }
  void evict_oldest_waiting() {
    int oldest = -1;
    std::uint64_t order = ~std::uint64_t(0);
    for (const auto& [fd, conn] : conns_)
      if (!conn.admitted && conn.order < order) oldest = fd, order = conn.order;
    if (oldest >= 0) refuse(oldest, "more than " + std::to_string(kMaxWaiting) + " connections wait for the handshake; the oldest goes");
  }
  void expire_handshakes() {
    const auto now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, conn] : conns_)
      if (!conn.admitted && now >= conn.deadline) late.push_back(fd);
    for (int fd : late) refuse(fd, "no handshake within " + std::to_string(kHandshakeTime.count()) + " s");
  }

  void on_readable(int fd) {
    Conn& conn = conns_.at(fd);
    char chunk[65536];
    for (int round = 0; round < 64; ++round) {
      const ssize_t k = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (k <= 0) {  // gone: a stranger that sent something and left is named
        if (!conn.admitted && !conn.in.empty()) return refuse(fd, "closed before finishing the handshake");
        return drop(fd);
      }
      conn.in.append(chunk, static_cast<std::size_t>(k));
      if (!conn.admitted && conn.in.size() > proto::kMaxHello) break;  // judged below; no more is buffered
    }
    std::size_t at = 0;
    std::string why;
    if (!conn.admitted) {
      proto::Hello answer;
      std::size_t used = 0;
      const proto::Parsed p = proto::parse_hello(conn.in, true, answer, used, why);
      if (p == proto::Parsed::bad) return refuse(fd, why);
      if (p == proto::Parsed::need_more) {
        if (conn.in.size() > proto::kMaxHello) return refuse(fd, "sent more than a handshake before finishing it");
        return;
      }
      if (const std::string reason = proto::judge_answer(creds_, conn.nonce, answer); !reason.empty())
        return refuse(fd, reason);
      if (!write_all(fd, proto::encode_accept(creds_, answer.nonce, conn.nonce))) return drop(fd);
      conn.admitted = true;
      at = used;
    }
    for (;;) {
      proto::Request req;
      std::size_t used = 0;
      const proto::Parsed p = proto::parse_request(std::string_view(conn.in).substr(at), req, used, why);
      if (p == proto::Parsed::bad) {
        refuse_note(conn.peer, "an admitted client sent " + why);
        return drop(fd);
      }
      if (p == proto::Parsed::need_more) break;
      at += used;
      if (!serve(fd, req)) return drop(fd);
    }
    conn.in.erase(0, at);
  }

  /// Tells the peer why, names it in the log, and closes the connection.
  void refuse(int fd, const std::string& reason) {
    const std::string peer = conns_.count(fd) ? conns_.at(fd).peer : peer_name(fd);
    const std::string r = proto::encode_refusal(reason);
    (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    refuse_note(peer, reason);
    drop(fd);
  }
  /// One log line per refusal; after the first 100, one per 1000 (a flood must not flood the log).
  void refuse_note(const std::string& who, const std::string& reason) {
    const std::size_t n = ++refused_;
    if (n <= 100 || n % 1000 == 0)
      std::fprintf(stderr, "[strata.runtime.tcp_store] the TCP store at %s refused %s: %s (refusal %zu)\n", where_.c_str(),
                   who.c_str(), reason.c_str(), n);
  }
  void drop(int fd) {
    ::close(fd);
    conns_.erase(fd);
    for (auto& [key, waiting] : waiters_) std::erase(waiting, fd);
    if (membership_) {
      std::erase_if(view_waiters_, [fd](const ViewWaiter& w) { return w.fd == fd; });
      membership_->lost(fd, Clock::now());
    }
  }

  /// A member's request waiting for a view: a join (answered by the first view that holds
  /// its id) or a wait (by the first view after its generation).
  struct ViewWaiter {
    int fd;
    std::string id;
    bool join;
    std::uint64_t after;
  };
  static bool reply_view(int fd, const View& v) {
    const std::string s = membership_wire::encode(v);
    return reply_value(fd, std::vector<char>(s.begin(), s.end()));
  }
  static View refusal_view(std::uint64_t g, const std::string& why) {
    View v;
    v.generation = g;
    v.state = View::State::refused;
    v.members = {why};
    return v;
  }
  /// A new view is out: answers the waiters it settles and closes the evicted members' leases.
  void publish() {
    const View& v = membership_->view();
    if (v.state == View::State::ended) {
      std::lock_guard lock(end_m_);
      end_ = v.reason();
    }
    std::vector<ViewWaiter> still;
    std::vector<int> gone;
    for (const ViewWaiter& w : view_waiters_) {
      const bool answered = v.state != View::State::member || (w.join ? v.rank_of(w.id) >= 0 : v.generation > w.after);
      if (!answered) {
        still.push_back(w);
      } else if (!reply_view(w.fd, v)) {
        gone.push_back(w.fd);
      }
    }
    view_waiters_ = std::move(still);
    for (int fd : membership_->take_to_close()) gone.push_back(fd);
    for (int fd : gone)
      if (conns_.count(fd)) drop(fd);
  }
  /// Serves a membership request.
  bool serve_membership(int fd, const proto::Request& req) {
    if (!membership_)
      return reply_view(fd, refusal_view(0, "this store serves no elastic job (strata-run --elastic MIN:MAX serves one)"));
    Membership& m = *membership_;
    const auto now = Clock::now();
    if (req.op == proto::kJoin) {
      if (const std::string why = m.join(req.key, fd, now); !why.empty()) return reply_view(fd, refusal_view(m.view().generation, why));
      view_waiters_.push_back({fd, req.key, true, 0});
      return true;
    }
    std::uint64_t g = 0;
    std::string more;
    if (!membership_wire::decode_generation(std::string_view(req.value.data(), req.value.size()), g, more))
      return reply_view(fd, refusal_view(m.view().generation, "a membership request without its generation"));
    if (req.op == proto::kEvict) {
      const std::string why = m.evict(g, req.key, more, now);
      return reply_view(fd, why.empty() ? m.view() : refusal_view(m.view().generation, why));
    }
    if (const std::string why = m.fence(g, req.key); !why.empty()) return reply_view(fd, refusal_view(m.view().generation, why));
    if (req.op == proto::kWait && m.view().generation <= g) {
      view_waiters_.push_back({fd, req.key, false, g});
      return true;
    }
    return reply_view(fd, m.view());
  }

  /// Serves one request of an admitted client; false when it is gone.
  bool serve(int fd, proto::Request& req) {
    switch (req.op) {
      case proto::kSet: {
        auto& slot = data_[req.key];
        slot = std::move(req.value);
        const std::uint8_t ok = 1;
        if (!write_all(fd, &ok, 1)) return false;
        if (auto w = waiters_.find(req.key); w != waiters_.end()) {
          const std::vector<int> parked = std::move(w->second);
          waiters_.erase(w);
          for (int other : parked) reply_value(other, slot);
        }
        return true;
      }
      case proto::kGet:
        if (auto it = data_.find(req.key); it != data_.end()) return reply_value(fd, it->second);
        waiters_[req.key].push_back(fd);
        return true;
      case proto::kCheck: {
        const std::uint8_t has = data_.count(req.key) ? 1 : 0;
        return write_all(fd, &has, 1);
      }
      case proto::kClaim: {
        auto [it, added] = data_.try_emplace(req.key, req.value);
        const std::uint8_t taken = added ? 0 : 1;
        return write_all(fd, &taken, 1) && reply_value(fd, it->second);
      }
      case proto::kJoin:
      case proto::kWait:
      case proto::kPoll:
      case proto::kEvict: return serve_membership(fd, req);
    }
    return false;
  }
  static bool reply_value(int fd, const std::vector<char>& v) {
    const auto n = static_cast<std::uint32_t>(v.size());
    return write_all(fd, &n, 4) && write_all(fd, v.data(), v.size());
  }

  proto::Credentials creds_;
  std::string where_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::map<int, Conn> conns_;
  std::map<std::string, std::vector<char>> data_;
  std::map<std::string, std::vector<int>> waiters_;
  std::optional<Membership> membership_;
  mutable std::mutex end_m_;
  std::string end_;
  std::vector<ViewWaiter> view_waiters_;
  Clock::time_point accept_paused_until_{};
  std::uint64_t accepted_ = 0;
  std::atomic<std::size_t> refused_{0};
  std::thread thread_;
};

}  // namespace tcp_store_detail

/// A client of the job's TCP store (and, on rank 0, its server). Thread-safe; one round trip
/// at a time.
class TcpStore {
 public:
  /// The process-wide store of the job at host:port; rank 0 starts the server on first use.
  /// Credentials come from the environment (STRATA_JOB_TOKEN).
  static TcpStore& instance(const std::string& host, int port, int rank, std::chrono::milliseconds timeout) {
    static std::mutex m;
    static std::map<std::pair<std::string, int>, std::unique_ptr<TcpStore>> stores;
    std::lock_guard lock(m);
    auto& s = stores[{host, port}];
    // In an elastic job strata-run serves the store (it must outlive every rank): no rank does.
    const bool serve = rank == 0 && !environment::get("STRATA_ELASTIC");
    if (!s) s = std::make_unique<TcpStore>(host, port, serve, timeout, store_protocol::Credentials::from_env());
    return *s;
  }

  /// A client of the store at host:port, which serves it too when `serve`.
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout, store_protocol::Credentials creds,
           std::optional<MembershipOptions> membership = std::nullopt)
      : host_(host), port_(port), timeout_(timeout), creds_(std::move(creds)) {
    support::require_crypto("The TCP store's handshake (its job-token proof)");
    if (serve) server_ = std::make_unique<tcp_store_detail::Server>(host, port, creds_, membership);
  }
  ~TcpStore() {
    if (fd_ >= 0) ::close(fd_);
  }
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) {
    std::lock_guard lock(m_);
    roundtrip(store_protocol::kSet, key, value, [&](int fd, auto deadline) {
      std::uint8_t ok = 0;
      return tcp_store_detail::read_all(fd, &ok, 1, deadline);
    });
  }
  /// The value of `key`, waiting up to `timeout` for some rank to set it.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) {
    std::lock_guard lock(m_);
    std::vector<char> out;
    roundtrip(store_protocol::kGet, key, {}, [&](int fd, auto deadline) { return read_value(fd, deadline, out); }, timeout);
    return out;
  }
  bool check(const std::string& key) {
    std::lock_guard lock(m_);
    std::uint8_t has = 0;
    roundtrip(store_protocol::kCheck, key, {},
              [&](int fd, auto deadline) { return tcp_store_detail::read_all(fd, &has, 1, deadline); });
    return has != 0;
  }
  /// Sets `key` to `value` if no one has; otherwise returns the value already there.
  std::string claim(const std::string& key, const std::string& value) {
    std::lock_guard lock(m_);
    std::uint8_t taken = 0;
    std::vector<char> holder;
    roundtrip(store_protocol::kClaim, key, std::vector<char>(value.begin(), value.end()), [&](int fd, auto deadline) {
      return tcp_store_detail::read_all(fd, &taken, 1, deadline) && read_value(fd, deadline, holder);
    });
    // A claim sent again after a lost reply finds this caller's own value: it holds the key.
    const std::string held(holder.begin(), holder.end());
    return taken && held != value ? held : std::string();
  }

  // An elastic job's membership (membership.hpp; the store must serve one: strata-run
  // --elastic). Each returns a view: the caller's generation, ended (the job is over, with
  // the reason), or refused (this process may not act, with the reason).

  /// Joins as `id`; this connection becomes the member's lease. Returns the first view that
  /// includes it.
  View join(const std::string& id, std::chrono::milliseconds timeout) { return view_request(store_protocol::kJoin, id, {}, timeout); }
  /// The first view after generation `g` (waits for it).
  View wait_view(const std::string& id, std::uint64_t g, std::chrono::milliseconds timeout) {
    return view_request(store_protocol::kWait, id, membership_wire::encode_generation(g), timeout);
  }
  /// The current view, at once.
  View poll_view(const std::string& id, std::uint64_t g) {
    return view_request(store_protocol::kPoll, id, membership_wire::encode_generation(g), std::chrono::milliseconds(0));
  }
  /// Reports that member `target` of generation `g` does not answer.
  View evict(const std::string& id, std::uint64_t g, const std::string& target) {
    return view_request(store_protocol::kEvict, id, membership_wire::encode_generation(g, target), std::chrono::milliseconds(0));
  }

  const std::string& host() const noexcept { return host_; }
  int port() const noexcept { return port_; }
  /// The server of this process (rank 0), or null.
  const tcp_store_detail::Server* server() const noexcept { return server_.get(); }

 private:
  View view_request(store_protocol::Op op, const std::string& id, const std::string& value, std::chrono::milliseconds timeout) {
    std::lock_guard lock(m_);
    std::vector<char> out;
    roundtrip(op, id, std::vector<char>(value.begin(), value.end()),
              [&](int fd, auto deadline) { return read_value(fd, deadline, out); }, timeout);
    View v;
    std::string why;
    STRATA_CHECK(membership_wire::decode(std::string_view(out.data(), out.size()), v, why), "TCP store at ", host_, ":", port_,
                 " answered a membership request with ", why);
    return v;
  }

  static bool read_value(int fd, std::chrono::steady_clock::time_point deadline, std::vector<char>& out) {
    std::uint32_t n = 0;
    if (!tcp_store_detail::read_all(fd, &n, 4, deadline)) return false;
    STRATA_CHECK(n <= store_protocol::kMaxValue, "TCP store: a reply of ", n, " bytes (at most ", store_protocol::kMaxValue, ")");
    out.resize(n);
    return tcp_store_detail::read_all(fd, out.data(), n, deadline);
  }

  /// Connects (retrying until the deadline: rank 0 may start later), sends one request and
  /// reads its reply. On failure the connection is dropped (a late reply must not be taken
  /// for the next request's) and the error names the store.
  template <class Reply>
  void roundtrip(store_protocol::Op op, const std::string& key, const std::vector<char>& value, Reply&& reply,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    STRATA_CHECK(key.size() <= store_protocol::kMaxKey && value.size() <= store_protocol::kMaxValue, "TCP store: key '", key,
                 "' (", key.size(), " bytes) or its value (", value.size(), " bytes) exceeds the store's bounds (",
                 store_protocol::kMaxKey, ", ", store_protocol::kMaxValue, ")");
    const auto deadline = std::chrono::steady_clock::now() + (timeout.count() > 0 ? timeout : timeout_);
    bool fresh = false;  // a connection made for this request
    if (fd_ >= 0 && closed_by_store()) {  // e.g. a lease the store ended (membership.hpp): one new connection
      ::close(fd_);
      fd_ = -1;
      if (!connect(deadline, /*once=*/true))
        STRATA_THROW(::strata::io_error, "strata.runtime.tcp_store", "TCP store at ", host_, ":", port_,
                     " closed the connection, and no longer answers (the process that serves it is gone)");
      fresh = true;
    }
    if (fd_ < 0) {
      connect(deadline);
      fresh = true;
    }
    const std::string msg = store_protocol::encode_request(op, key, value);
    for (;;) {
      if (tcp_store_detail::write_all(fd_, msg) && reply(fd_, deadline)) return;
      const bool expired = std::chrono::steady_clock::now() >= deadline;
      ::close(fd_);
      fd_ = -1;
      if (expired)
        STRATA_THROW(::strata::timeout_error, "strata.runtime.tcp_store", "TCP store at ", host_, ":", port_, ": key '", key,
                     "' not available within ", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    timeout.count() > 0 ? timeout : timeout_).count(), " ms");
      // The store may end a connection (a lease it closed) just as a request goes out on it:
      // the request then meets the close, not an answer. Once, on a new connection; every
      // request is safe to send again (the store answers a repeated one the same way).
      if (!fresh && connect(deadline, /*once=*/true)) {
        fresh = true;
        continue;
      }
      STRATA_THROW(::strata::io_error, "strata.runtime.tcp_store", "TCP store at ", host_, ":", port_,
                   " closed the connection (rank 0, which serves it, is gone)");
    }
  }

  /// The store closed this connection: it never speaks unasked, so a readable socket between
  /// requests holds only the end of the stream.
  bool closed_by_store() const {
    pollfd pfd{fd_, POLLIN, 0};
    return ::poll(&pfd, 1, 0) > 0;
  }

  /// Connects and passes the handshake, retrying until `deadline` (rank 0 may start later);
  /// with `once`, one try, false when it fails.
  bool connect(std::chrono::steady_clock::time_point deadline, bool once = false) {
    const sockaddr_in a = tcp_store_detail::address(host_, port_, "TCP store: ");
    std::string last = "no answer";
    for (bool first = true; first || (!once && std::chrono::steady_clock::now() < deadline); first = false) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      STRATA_CHECK(fd >= 0, "TCP store: socket: ", std::strerror(errno));
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (handshake(fd, deadline, last)) {
          fd_ = fd;
          return true;
        }
      } else {
        last = std::strerror(errno);
      }
      ::close(fd);
      if (once) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    STRATA_THROW(::strata::timeout_error, "strata.runtime.tcp_store", "cannot reach the TCP store at ", host_, ":", port_,
                 " (STRATA_MASTER_ADDR:STRATA_MASTER_PORT, served by rank 0): ", last);
  }

  /// The handshake of store_protocol.hpp on a fresh connection: true when admitted; false
  /// when the connection ended early (the caller retries); throws when the store refuses this
  /// process or is not this job's store.
  bool handshake(int fd, std::chrono::steady_clock::time_point deadline, std::string& last) {
    namespace proto = store_protocol;
    const std::string where = host_ + ":" + std::to_string(port_);
    auto fail = [&](const std::string& why) {
      ::close(fd);
      STRATA_THROW(::strata::invalid_argument, "strata.runtime.tcp_store", "the TCP store at ", where, " ", why);
    };
    std::string in, why;
    proto::Hello greeting;
    std::size_t used = 0;
    for (;;) {
      const proto::Parsed p = proto::parse_hello(in, false, greeting, used, why);
      if (p == proto::Parsed::bad) fail("is not a strata TCP store (STRATA_MASTER_PORT?): " + why);
      if (p == proto::Parsed::done) break;
      if (!tcp_store_detail::read_some(fd, in, deadline)) {
        last = "the connection ended during the handshake";
        return false;
      }
    }
    in.erase(0, used);
    const std::string nonce = support::random_bytes(proto::kNonceBytes);
    if (!tcp_store_detail::write_all(fd, proto::encode_answer(creds_, greeting.nonce, nonce))) {
      last = "the connection ended during the handshake";
      return false;
    }
    // A store of another wire version is named by its version, whatever else it sends; the
    // verdict is still read, so that the store has read this process's version and names it too.
    const std::string skew = greeting.version == creds_.version
                                 ? std::string()
                                 : "speaks wire protocol v" + std::to_string(greeting.version) + ", this process v" +
                                       std::to_string(creds_.version) + ": every process of the job must run the same strata build";
    bool accepted = false;
    std::string text;
    for (;;) {
      const proto::Parsed p = skew.empty() ? proto::parse_verdict(in, accepted, text, used, why) : proto::Parsed::need_more;
      if (p == proto::Parsed::bad) fail("broke the handshake: " + why);
      if (p == proto::Parsed::done) break;
      if (!tcp_store_detail::read_some(fd, in, skew.empty() ? deadline : std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2)))) {
        if (!skew.empty()) fail(skew);
        last = "the connection ended during the handshake";
        return false;
      }
    }
    if (!accepted) fail("refused this process: " + text + " (STRATA_JOB_TOKEN; strata-run sets it for its ranks)");
    const support::Digest want = proto::server_mac(creds_.token, nonce, greeting.nonce);
    if (text.size() != want.size() || !support::equal_in_constant_time(text.data(), want.data(), want.size()))
      fail("admitted this process without proving it holds this job's token: it serves another job "
           "(STRATA_MASTER_PORT?) or its STRATA_JOB_TOKEN differs");
    return true;
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  store_protocol::Credentials creds_;
  std::unique_ptr<tcp_store_detail::Server> server_;
  std::mutex m_;
  int fd_ = -1;
};

}  // namespace strata::runtime

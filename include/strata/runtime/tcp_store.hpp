/// \file
/// A key-value store over TCP for rendezvous without a shared directory (torchrun's TCPStore):
/// rank 0 serves it on STRATA_MASTER_ADDR:STRATA_MASTER_PORT (127.0.0.1 unless told
/// otherwise); every rank, rank 0 included, is a client. Keys are set once and read many
/// times; a read waits until the key is set or the deadline passes.
///
/// One server and one client connection per process, shared by every communicator of the
/// job (their keys carry the communicator's prefix). The server thread sleeps in poll().
///
/// Wire format, one request per round trip: op (1 byte), key length (u32), key, value length
/// (u32), value. Replies: get -> value length + value; set -> 1 byte; check -> 1 byte
/// (0 or 1); claim -> 1 byte (0: claimed; 1: taken) + the holder's value.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/support/error.hpp>

namespace strata::runtime {

namespace tcp_store_detail {

enum Op : std::uint8_t { kSet = 'S', kGet = 'G', kCheck = 'C', kClaim = 'X' };

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

/// Reads exactly `n` bytes, waiting at most until `deadline`; false on EOF, error or expiry.
inline bool read_all(int fd, void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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

inline std::string frame(Op op, const std::string& key, const std::vector<char>& value = {}) {
  std::string m(1, static_cast<char>(op));
  auto put = [&m](std::uint32_t n) { m.append(reinterpret_cast<const char*>(&n), sizeof n); };
  put(static_cast<std::uint32_t>(key.size()));
  m += key;
  put(static_cast<std::uint32_t>(value.size()));
  m.append(value.data(), value.size());
  return m;
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

/// The store's server: one thread, poll() over the listening socket and the clients. A get
/// of a key not yet set parks the client until a set arrives.
class Server {
 public:
  Server(const std::string& host, int port) {
    const sockaddr_in a = address(host, port, "TCP store: ");
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    STRATA_CHECK(listen_fd_ >= 0, "TCP store: socket: ", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 256) != 0) {
      const int err = errno;
      ::close(listen_fd_);
      STRATA_THROW(::strata::invalid_argument, "strata.runtime.tcp_store", "rank 0 cannot serve the TCP store on ", host, ":",
                   port, " (STRATA_MASTER_ADDR:STRATA_MASTER_PORT): ", std::strerror(err),
                   err == EADDRINUSE ? "; the port is in use: pick another STRATA_MASTER_PORT" : "");
    }
    STRATA_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "TCP store: pipe: ", std::strerror(errno));
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  void loop() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          const int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_.insert(c);
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents && !serve(fds[i].fd)) drop(fds[i].fd);
    }
  }
  void drop(int fd) {
    ::close(fd);
    clients_.erase(fd);
    for (auto& [key, waiting] : waiters_) std::erase(waiting, fd);
  }
  /// Serves one request from `fd`; false when the client is gone or speaks nonsense.
  bool serve(int fd) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::uint8_t op = 0;
    std::uint32_t n = 0;
    if (!read_all(fd, &op, 1, deadline) || !read_all(fd, &n, 4, deadline) || n > (1u << 20)) return false;
    std::string key(n, '\0');
    if (!read_all(fd, key.data(), n, deadline) || !read_all(fd, &n, 4, deadline) || n > (64u << 20)) return false;
    std::vector<char> value(n);
    if (!read_all(fd, value.data(), n, deadline)) return false;
    switch (op) {
      case kSet: {
        auto& slot = data_[key];
        slot = std::move(value);
        const std::uint8_t ok = 1;
        if (!write_all(fd, &ok, 1)) return false;
        if (auto w = waiters_.find(key); w != waiters_.end()) {
          for (int other : w->second) reply_value(other, slot);
          waiters_.erase(w);
        }
        return true;
      }
      case kGet:
        if (auto it = data_.find(key); it != data_.end()) return reply_value(fd, it->second);
        waiters_[key].push_back(fd);
        return true;
      case kCheck: {
        const std::uint8_t has = data_.count(key) ? 1 : 0;
        return write_all(fd, &has, 1);
      }
      case kClaim: {
        auto [it, added] = data_.try_emplace(key, value);
        const std::uint8_t taken = added ? 0 : 1;
        return write_all(fd, &taken, 1) && reply_value(fd, it->second);
      }
      default: return false;
    }
  }
  static bool reply_value(int fd, const std::vector<char>& v) {
    const auto n = static_cast<std::uint32_t>(v.size());
    return write_all(fd, &n, 4) && write_all(fd, v.data(), v.size());
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::set<int> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::map<std::string, std::vector<int>> waiters_;
  std::thread thread_;
};

}  // namespace tcp_store_detail

/// A client of the job's TCP store (and, on rank 0, its server). Thread-safe; one round trip
/// at a time.
class TcpStore {
 public:
  /// The process-wide store of the job at host:port; rank 0 starts the server on first use.
  static TcpStore& instance(const std::string& host, int port, int rank, std::chrono::milliseconds timeout) {
    static std::mutex m;
    static std::map<std::pair<std::string, int>, std::unique_ptr<TcpStore>> stores;
    std::lock_guard lock(m);
    auto& s = stores[{host, port}];
    if (!s) s.reset(new TcpStore(host, port, rank, timeout));
    return *s;
  }

  void set(const std::string& key, const std::vector<char>& value) {
    std::lock_guard lock(m_);
    roundtrip(tcp_store_detail::kSet, key, value, [&](int fd, auto deadline) {
      std::uint8_t ok = 0;
      return tcp_store_detail::read_all(fd, &ok, 1, deadline);
    });
  }
  /// The value of `key`, waiting up to `timeout` for some rank to set it.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) {
    std::lock_guard lock(m_);
    std::vector<char> out;
    roundtrip(tcp_store_detail::kGet, key, {}, [&](int fd, auto deadline) { return read_value(fd, deadline, out); }, timeout);
    return out;
  }
  bool check(const std::string& key) {
    std::lock_guard lock(m_);
    std::uint8_t has = 0;
    roundtrip(tcp_store_detail::kCheck, key, {},
              [&](int fd, auto deadline) { return tcp_store_detail::read_all(fd, &has, 1, deadline); });
    return has != 0;
  }
  /// Sets `key` to `value` if no one has; otherwise returns the value already there.
  std::string claim(const std::string& key, const std::string& value) {
    std::lock_guard lock(m_);
    std::uint8_t taken = 0;
    std::vector<char> holder;
    roundtrip(tcp_store_detail::kClaim, key, std::vector<char>(value.begin(), value.end()), [&](int fd, auto deadline) {
      return tcp_store_detail::read_all(fd, &taken, 1, deadline) && read_value(fd, deadline, holder);
    });
    return taken ? std::string(holder.begin(), holder.end()) : std::string();
  }

  const std::string& host() const noexcept { return host_; }
  int port() const noexcept { return port_; }

 private:
  TcpStore(const std::string& host, int port, int rank, std::chrono::milliseconds timeout)
      : host_(host), port_(port), timeout_(timeout) {
    if (rank == 0) server_ = std::make_unique<tcp_store_detail::Server>(host, port);
  }

  static bool read_value(int fd, std::chrono::steady_clock::time_point deadline, std::vector<char>& out) {
    std::uint32_t n = 0;
    if (!tcp_store_detail::read_all(fd, &n, 4, deadline)) return false;
    out.resize(n);
    return tcp_store_detail::read_all(fd, out.data(), n, deadline);
  }

  /// Connects (retrying until the deadline: rank 0 may start later), sends one request and
  /// reads its reply. On failure the connection is dropped (a late reply must not be taken
  /// for the next request's) and the error names the store.
  template <class Reply>
  void roundtrip(tcp_store_detail::Op op, const std::string& key, const std::vector<char>& value, Reply&& reply,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    const auto deadline = std::chrono::steady_clock::now() + (timeout.count() > 0 ? timeout : timeout_);
    if (fd_ < 0) connect(deadline);
    const std::string msg = tcp_store_detail::frame(op, key, value);
    if (tcp_store_detail::write_all(fd_, msg.data(), msg.size()) && reply(fd_, deadline)) return;
    const bool expired = std::chrono::steady_clock::now() >= deadline;
    ::close(fd_);
    fd_ = -1;
    if (expired)
      STRATA_THROW(::strata::timeout_error, "strata.runtime.tcp_store", "TCP store at ", host_, ":", port_, ": key '", key,
                   "' not available within ", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  timeout.count() > 0 ? timeout : timeout_).count(), " ms");
    STRATA_THROW(::strata::io_error, "strata.runtime.tcp_store", "TCP store at ", host_, ":", port_,
                 " closed the connection (rank 0, which serves it, is gone)");
  }

  void connect(std::chrono::steady_clock::time_point deadline) {
    const sockaddr_in a = tcp_store_detail::address(host_, port_, "TCP store: ");
    int last = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      STRATA_CHECK(fd >= 0, "TCP store: socket: ", std::strerror(errno));
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
        return;
      }
      last = errno;
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    STRATA_THROW(::strata::timeout_error, "strata.runtime.tcp_store", "cannot reach the TCP store at ", host_, ":", port_,
                 " (STRATA_MASTER_ADDR:STRATA_MASTER_PORT, served by rank 0): ", std::strerror(last));
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<tcp_store_detail::Server> server_;
  std::mutex m_;
  int fd_ = -1;
};

}  // namespace strata::runtime

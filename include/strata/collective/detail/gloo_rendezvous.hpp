/// \file
/// The Gloo policy's rendezvous: where the ranks of one communicator meet (a Gloo file store in
/// a private directory, or the job's TCP store), each rank's claim ("host:pid", taken with an
/// exclusive create), and what the census of a failed collective reads on this host — which
/// claimed peers are gone or stopped, this process's connected sockets, the network
/// interfaces for error messages. Used by collective::Gloo (gloo.hpp) only.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_GLOO

#include <gloo/alltoall.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/runtime/process_state.hpp>
#include <strata/runtime/store_protocol.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/support/crypto.hpp>
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>

namespace strata::collective::detail {

/// This process's connected TCP sockets (descriptors), but those to or from `except_port`.
inline std::vector<int> connected_sockets(int except_port) {
  std::vector<int> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, lp = sizeof peer;
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &lp) != 0)
      continue;  // not a socket, or not connected
    auto port = [](const sockaddr_storage& a) {
      return a.ss_family == AF_INET    ? ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port)
             : a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port)
                                       : -1;
    };
    if (port(local) < 0 || port(local) == except_port || port(peer) == except_port) continue;
    out.push_back(fd);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

/// Gloo's file store, with its key check made public (to name ranks that never arrived).
struct FileStore : gloo::rendezvous::FileStore {
  using gloo::rendezvous::FileStore::FileStore;
  using gloo::rendezvous::FileStore::check;
};

/// "host:" of this process's claims.
inline std::string host_prefix() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":";
}

/// Where the ranks of one communicator meet: a Gloo file store in a private directory, or the
/// job's TCP store. Besides Gloo's keys it holds each rank's claim, "host:pid": taken with an
/// exclusive create, so a second process with the same rank fails at once (RELIABILITY D5),
/// and read back after the rendezvous to name a lost or stopped peer on this host.
class Rendezvous {
 public:
  /// A file store in `dir` (STRATA_RENDEZVOUS_DIR), checked to be a private directory.
  static Rendezvous files(const std::string& dir, const std::string& prefix) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      STRATA_THROW(::strata::invalid_argument, "strata.collective.gloo", "STRATA_RENDEZVOUS_DIR=", dir, " is not a directory");
    if (st.st_mode & (S_IRWXG | S_IRWXO))
      STRATA_THROW(::strata::invalid_argument, "strata.collective.gloo", "STRATA_RENDEZVOUS_DIR=", dir,
                   " is readable by other users (mode ", std::oct, (st.st_mode & 0777), "); use a directory of mode 0700");
    Rendezvous r(prefix);
    r.dir_ = dir;
    r.files_ = std::make_shared<FileStore>(dir);
    r.store_ = std::make_shared<gloo::rendezvous::PrefixStore>(prefix, *r.files_);
    return r;
  }
  /// The job's TCP store at host:port (rank 0 serves it).
  /// `abandoned`, when set, is asked while a wait goes on: a reason ends it (Options).
  static Rendezvous tcp(const std::string& host, int port, int rank, const std::string& prefix,
                        std::chrono::milliseconds timeout, std::function<std::string()> abandoned = {}) {
    Rendezvous r(prefix);
    r.tcp_ = &runtime::TcpStore::instance(host, port, rank, timeout);
    // Rank 0 serves the store, and its process takes the store with it when it fails: it waits
    // a second longer, so the other ranks read who is missing before it gives up.
    r.tcp_adapter_ = std::make_shared<TcpStoreAdapter>(*r.tcp_, timeout,
                                                       rank == 0 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(0),
                                                       std::move(abandoned));
    r.store_ = std::make_shared<gloo::rendezvous::PrefixStore>(prefix, *r.tcp_adapter_);
    return r;
  }

  gloo::rendezvous::Store& store() { return *store_; }
  std::string where() const { return tcp_ ? "TCP store " + tcp_->host() + ":" + std::to_string(tcp_->port()) : dir_; }

  /// Claims `rank`, or fails naming both claimants.
  void claim(int rank) {
    const std::string me = host_prefix() + std::to_string(::getpid());
    std::string other;
    if (tcp_) {
      other = tcp_->claim(claim_key(rank), me);
      if (other.empty()) return;
    } else {
      const std::string path = claim_path(rank);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      if (fd >= 0) {
        const ssize_t n = ::write(fd, me.data(), me.size());
        ::close(fd);
        if (n == static_cast<ssize_t>(me.size())) return;
        STRATA_THROW(::strata::io_error, "strata.collective.rendezvous", "cannot write ", path, ": ", std::strerror(errno));
      }
      if (errno != EEXIST)
        STRATA_THROW(::strata::io_error, "strata.collective.rendezvous", "cannot create ", path, ": ", std::strerror(errno));
      other = read_file(path);
      if (other.empty()) other = "another process";
    }
    STRATA_THROW(::strata::invalid_argument, "strata.collective.rendezvous", "rank ", rank, " of rendezvous '", prefix_,
                 "' claimed by ", other, " and ", me, ": two processes have the same rank (STRATA_RANK)",
                 tcp_ ? "" : ", or " + dir_ + " is left from an earlier job (use a fresh directory per job)");
  }
  /// Every rank's claim ("host:pid"; empty where none can be read).
  std::vector<std::string> claims(int size) {
    std::vector<std::string> out(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      if (tcp_) {
        const std::vector<char> v = tcp_->get(claim_key(r), std::chrono::seconds(5));
        out[static_cast<std::size_t>(r)].assign(v.begin(), v.end());
      } else {
        out[static_cast<std::size_t>(r)] = read_file(claim_path(r));
      }
    }
    return out;
  }
  /// Records `name` (the census after a deadline: "seq/rank" for each rank that reached it).
  void mark(const std::string& name) {
    if (tcp_) {
      tcp_->set(census_key(name), {'1'});
    } else if (const int fd = ::open(census_path(name).c_str(), O_WRONLY | O_CREAT, 0600); fd >= 0) {
      ::close(fd);
    }
  }
  bool marked(const std::string& name) {
    return tcp_ ? tcp_->check(census_key(name)) : ::access(census_path(name).c_str(), F_OK) == 0;
  }
  /// The ranks that never published their address (Gloo's keys are "prefix/rank").
  std::vector<int> missing(int size) {
    std::vector<int> out;
    for (int k = 0; k < size; ++k) {
      const std::string key = prefix_ + "/" + std::to_string(k);
      if (!(tcp_ ? tcp_->check(key) : files_->check({key}))) out.push_back(k);
    }
    return out;
  }

 private:
  explicit Rendezvous(std::string prefix) : prefix_(std::move(prefix)) {}

  /// Gloo's store interface over the TCP store; waits are bounded by the communicator's timeout.
  struct TcpStoreAdapter : gloo::rendezvous::Store {
    TcpStoreAdapter(runtime::TcpStore& s, std::chrono::milliseconds t, std::chrono::milliseconds m,
                    std::function<std::string()> a)
        : store(s), timeout(t), margin(m), abandoned(std::move(a)) {}
    void set(const std::string& key, const std::vector<char>& data) override { store.set(key, data); }
    std::vector<char> get(const std::string& key) override {
      return get_by(key, std::chrono::steady_clock::now() + timeout + margin);
    }
    void wait(const std::vector<std::string>& keys) override { wait(keys, timeout); }
    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
      const auto deadline = std::chrono::steady_clock::now() + t + margin;
      for (const auto& k : keys) get_by(k, deadline);
    }
    std::vector<char> get_by(const std::string& key, std::chrono::steady_clock::time_point deadline) {
      auto left = [&] {
        return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          deadline - std::chrono::steady_clock::now()));
      };
      // With a reason to give up to ask, the wait is a poll: the store's blocking get could not
      // be left early.
      while (abandoned && !store.check(key) && std::chrono::steady_clock::now() < deadline) {
        if (const std::string why = abandoned(); !why.empty())
          STRATA_THROW(collective_error, "strata.collective.rendezvous", "the rendezvous waiting for '", key,
                       "' was abandoned: ", why);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return store.get(key, left());
    }
    runtime::TcpStore& store;
    std::chrono::milliseconds timeout, margin;  // margin: rank 0 outwaits the others
    std::function<std::string()> abandoned;
  };

  std::string census_key(const std::string& name) const { return "strata.census/" + prefix_ + "/" + name; }
  std::string census_path(const std::string& name) const {
    std::string flat = name;
    for (char& c : flat) c = c == '/' ? '.' : c;
    return dir_ + "/" + prefix_ + ".census." + flat;
  }
  std::string claim_key(int rank) const { return "strata.claim/" + prefix_ + "/" + std::to_string(rank); }
  std::string claim_path(int rank) const { return dir_ + "/" + prefix_ + ".rank" + std::to_string(rank) + ".claim"; }
  static std::string read_file(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return {};
    char buf[300] = {};
    const bool read = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    return read ? buf : "";
  }

  std::string prefix_, dir_;
  std::shared_ptr<FileStore> files_;
  runtime::TcpStore* tcp_ = nullptr;
  std::shared_ptr<TcpStoreAdapter> tcp_adapter_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
};

/// The ranks (other than `self`) whose claimed process runs on this host and is in one of
/// `states` (e.g. "XZ": gone; "Tt": stopped). Polls up to `tries` x 10 ms until one is found,
/// since a killed peer's sockets close a moment before its process is gone. Empty when none
/// can be named (e.g. the peers run on other hosts).
inline std::vector<int> local_ranks_in_state(const std::vector<std::string>& claims, int self, const char* states, int tries) {
  const std::string mine = host_prefix();
  std::vector<int> found;
  for (int attempt = 0; attempt < tries && found.empty(); ++attempt) {
    if (attempt) ::usleep(10000);
    for (std::size_t r = 0; r < claims.size(); ++r) {
      if (static_cast<int>(r) == self || claims[r].rfind(mine, 0) != 0) continue;  // none, or another host
      if (std::strchr(states, runtime::process_state(std::atol(claims[r].c_str() + mine.size()))))
        found.push_back(static_cast<int>(r));
    }
  }
  return found;
}

/// The proof that the connection from rank `from` to rank `to` of a mesh belongs to the job:
/// a MAC under the job token over the mesh's nonce and both ranks.
inline support::Digest pair_proof(const std::string& token, const std::string& nonce, int from, int to) {
  return support::hmac_sha256(token, "strata gloo pair " + nonce + " " + std::to_string(from) + " " + std::to_string(to));
}

/// Every connection of a full mesh proves it belongs to the job: each rank sends each peer
/// its pair_proof over that very connection (one all-to-all of 32 bytes per pair; the token
/// never crosses the wire). Returns the peers whose proof does not match: a process outside
/// the job holds that connection, or the peer was given another STRATA_JOB_TOKEN.
inline std::vector<int> peers_without_proof(const std::shared_ptr<gloo::Context>& ctx, const std::string& token,
                                            const std::string& nonce, std::chrono::milliseconds timeout) {
  const int n = ctx->size, me = ctx->rank;
  std::vector<std::uint8_t> out(32 * static_cast<std::size_t>(n)), in(out.size());
  for (int p = 0; p < n; ++p) {
    const support::Digest d = pair_proof(token, nonce, me, p);
    std::copy(d.begin(), d.end(), out.begin() + 32 * p);
  }
  gloo::AlltoallOptions o(ctx);
  o.setInput(out.data(), out.size());
  o.setOutput(in.data(), in.size());
  o.setTimeout(timeout);
  gloo::alltoall(o);
  std::vector<int> bad;
  for (int p = 0; p < n; ++p) {
    const support::Digest want = pair_proof(token, nonce, p, me);
    if (p != me && !support::equal_in_constant_time(in.data() + 32 * p, want.data(), want.size())) bad.push_back(p);
  }
  return bad;
}

/// The names of this host's network interfaces, for error messages.
inline std::string interface_names() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "(unknown)";
  std::vector<std::string> names;
  for (ifaddrs* a = list; a; a = a->ifa_next)
    if (a->ifa_name && std::find(names.begin(), names.end(), a->ifa_name) == names.end()) names.emplace_back(a->ifa_name);
  ::freeifaddrs(list);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace strata::collective::detail

#endif  // STRATA_HAS_GLOO

/// \file
/// ps::Transport<collective::Gloo>: the messages of a ParameterServerStrategy over Gloo's TCP
/// pairs, for jobs started by strata-run (no MPI). Gloo moves bytes on its own I/O threads,
/// so nothing here polls: a worker blocks on its replies, and a server's listener threads
/// block on the next request header from their workers and queue it for the request loop.
///
/// Each server and each worker share a link (detail::GlooLinks, gloo_links.hpp): a two-rank
/// Gloo communicator of their own, which a server serves with a listener thread; a link that
/// closes (its worker died) is that worker's loss, reported at once. Every link is a
/// rendezvous that checks the peer's job token and build, as every strata communicator does.
///
/// A worker's message to a server is a 24-byte header (tag, payload bytes, a value: the
/// learning rate) on one slot, then, for a push, the payload on the partition's slot; a
/// server's reply is the payload alone on the partition's reply slot. A peer that dies
/// closes its link: the waits on it fail at once and the error names it.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_GLOO
#error "ParameterServerStrategy<collective::Gloo> needs Gloo: configure strata with -Dgloo=enabled (Debian: libgloo-dev), or by hand: -DSTRATA_HAS_GLOO=1 -lgloo"
#else

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/runtime/process.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/strategy/parameter_server/backoff.hpp>
#include <strata/strategy/parameter_server/gloo_links.hpp>
#include <strata/strategy/parameter_server/roles.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/strategy/parameter_server/transport.hpp>
#include <strata/support/check.hpp>

namespace strata::ps {

template <>
class Transport<collective::Gloo> {
  using Links = detail::GlooLinks;
  using Header = Links::Header;
  using Buffer = Links::Buffer;
  static constexpr std::uint64_t kHeaderSlot = Links::kHeaderSlot, kPayloadSlot = std::uint64_t{1} << 20,
                                 kReplySlot = std::uint64_t{1} << 21;
  static constexpr int kServerEnd = Links::kServerEnd, kWorkerEnd = Links::kWorkerEnd;

 public:
  /// Gloo progresses on its own threads: no polling window.
  static constexpr std::chrono::microseconds poll_window{0};

  /// A send or receive in flight (done once waited for).
  struct Request {
    Buffer data, header;
    std::shared_ptr<Header> header_bytes;
    bool send = false, done = false;
    std::string failed;  ///< why it could not start (the peer's connection had closed)
  };
  /// A request header that arrived.
  using Message = Links::Arrival;

  /// A rank of the job (runtime::detect_process()): `requested_servers` serve (ps::Roles).
  /// With STRATA_PS_JOIN=1, a worker that joins the running job instead (Joiner below).
  explicit Transport(int requested_servers, collective::Options o = collective::Options::from_env())
      : Transport(joining(), requested_servers, o) {}
  /// A worker that joins a running job whose servers admit joiners (admit_joiners()): it
  /// takes the next free worker slot through the job's TCP store (STRATA_MASTER_ADDR/PORT)
  /// and builds its link with each server. Its rank is past the job's first ranks; its
  /// world() and group() are groups of one.
  struct Joiner {};
  explicit Transport(Joiner, collective::Options o = collective::Options::from_env()) : Transport(true, 0, o) {}

 private:
  Transport(bool join, int requested_servers, collective::Options o)
      : info_(runtime::detect_process()), prefix_("ps" + std::to_string(instances()++)),
        world_(join ? alone(info_) : info_, prefix_ + ".world", o),
        roles_(join ? Roles{} : Roles::of(world_.size(), requested_servers)), options_(o), joined_job_(join) {
    if (join) {
      join_job();
      return;
    }
    runtime::ProcessInfo mine = info_;
    mine.rank = roles_.index_of(info_.rank);
    mine.world_size = static_cast<int>((is_server() ? roles_.servers : roles_.workers).size());
    group_ = std::make_unique<collective::Gloo>(mine, prefix_ + (is_server() ? ".servers" : ".workers"), o);
    // Both ends build their links in ascending (server, worker) order: the first link not
    // built yet is the next one for both its ends.
    links_.emplace(info_, is_server(), prefix_, o);
    const int me = roles_.index_of(info_.rank);
    for (int peer : is_server() ? roles_.workers : roles_.servers) {
      const int other = roles_.index_of(peer);
      links_->add(peer, is_server() ? me : other, is_server() ? other : me);
    }
  }
  static bool joining() {
    return runtime::detail::env_either("STRATA_PS_JOIN", "0", "1", "strata.ps");
  }
  void join_job() {
    const collective::Options& o = options_;
    STRATA_REQUIRE(info_.rendezvous_dir.empty(), invalid_argument, "strata.ps",
                   "a worker joins through the job's TCP store, but STRATA_RENDEZVOUS_DIR is set");
    info_.launcher = "env";  // its links listen where the job's do (collective::Gloo::attr_for)
    runtime::TcpStore& store = runtime::TcpStore::instance(info_.master_addr, info_.master_port, kWorkerEnd, o.timeout);
    const std::vector<char> job = store.get(prefix_ + ".joiners", o.timeout);  // "ranks first_slot s0,s1,..."
    int ranks = 0, first = 0;
    std::string servers(job.size(), '\0');
    STRATA_REQUIRE(std::sscanf(std::string(job.begin(), job.end()).c_str(), "%d %d %s", &ranks, &first, servers.data()) == 3,
                   invalid_argument, "strata.ps", "the job's store holds no parameter-server job that admits workers");
    for (const char* at = servers.c_str(); *at;) {
      char* end = nullptr;
      roles_.servers.push_back(static_cast<int>(std::strtol(at, &end, 10)));
      STRATA_REQUIRE(end != at && (*end == ',' || *end == '\0'), invalid_argument, "strata.ps",
                     "the job's store names its servers as '", servers.c_str(), "'");
      at = *end == ',' ? end + 1 : end;
    }
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    const std::string id = std::string(host) + ":" + std::to_string(::getpid());
    int slot = first;
    while (!store.claim(slot_key(slot), id).empty()) ++slot;
    info_.rank = ranks + slot - first;
    roles_.workers = {info_.rank};
    group_ = std::make_unique<collective::Gloo>(alone(info_), prefix_ + ".workers", o);
    links_.emplace(info_, false, prefix_, o);
    for (std::size_t k = 0; k < roles_.servers.size(); ++k) links_->add(roles_.servers[k], static_cast<int>(k), slot);
  }

 public:
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /// A server: from now on, admits the workers that join (Transport(Joiner)). Needs the job's
  /// TCP store. Each joiner's link is built on a thread of its own; once built, the request
  /// loop hears kWorkerJoinedTag from the joiner's rank, and calls admit(rank) before
  /// anything else it sends.
  void admit_joiners() {
    STRATA_REQUIRE(is_server(), invalid_argument, "strata.ps", "rank ", rank(), " is a worker: servers admit joiners");
    STRATA_REQUIRE(info_.rendezvous_dir.empty(), invalid_argument, "strata.ps",
                   "workers join through the job's TCP store (strata-run --rendezvous tcp), but this job meets "
                   "through the files of STRATA_RENDEZVOUS_DIR");
    if (links_->accepting()) return;
    runtime::TcpStore& store = runtime::TcpStore::instance(info_.master_addr, info_.master_port, info_.rank, options_.timeout);
    const int first = static_cast<int>(roles_.workers.size());
    if (rank() == roles_.servers.front()) {
      std::string job = std::to_string(world_.size()) + " " + std::to_string(first) + " ";
      for (std::size_t k = 0; k < roles_.servers.size(); ++k) job += (k ? "," : "") + std::to_string(roles_.servers[k]);
      store.set(prefix_ + ".joiners", std::vector<char>(job.begin(), job.end()));
    }
    links_->accept_joiners(store, first, world_.size(), roles_.index_of(info_.rank));
  }
  /// The request loop, on kWorkerJoinedTag from `r`: r is one of the workers from now on.
  void admit(int r) {
    STRATA_REQUIRE(links_->admit(r), invalid_argument, "strata.ps", "server rank ", rank(), ": no worker rank ", r,
                   " has joined");
    roles_.workers.push_back(r);
  }

  const Roles& roles() const noexcept { return roles_; }
  int rank() const noexcept { return info_.rank; }
  bool is_server() const { return roles_.is_server(info_.rank); }
  collective::Gloo& world() noexcept { return world_; }
  collective::Gloo& group() noexcept { return *group_; }
  std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }
  /// Rank r's process state where it runs on this host ('?' otherwise): through its link,
  /// which knows a joiner too, else through the job's first communicator.
  char peer_state(int r) const {
    const auto& peers = is_server() ? roles_.workers : roles_.servers;
    const auto at = std::find(peers.begin(), peers.end(), r);
    if (at != peers.end() && static_cast<std::size_t>(at - peers.begin()) < links_->size())
      return (*links_)[static_cast<std::size_t>(at - peers.begin())].pair->peer_state(is_server() ? kWorkerEnd : kServerEnd);
    return world_.peer_state(r);
  }
  /// A worker that joined the running job (Transport(Joiner), or STRATA_PS_JOIN=1).
  bool joined() const noexcept { return joined_job_; }

  /// To a server: the header, then (a push) the payload. To a worker: the payload (a reply).
  /// A peer whose connection has closed already fails the request, which wait_all reports.
  Request isend(const void* data, std::size_t bytes, int to, int tag) {
    Request r;
    r.send = true;
    try {
      Links::Link& l = link(to);
      if (roles_.is_server(to)) {
        r.header_bytes = std::make_shared<Header>();
        r.header_bytes->tag = tag;
        r.header_bytes->bytes = bytes;
        if (tag >= kLearningRateTag) {  // control: the value travels in the header
          if (bytes == sizeof(double)) std::memcpy(&r.header_bytes->value, data, sizeof(double));
        }
        r.header = buffer(l, r.header_bytes.get(), sizeof(Header));
        r.header->send(kServerEnd, kHeaderSlot);
        if (tag < kLearningRateTag && bytes > 0) {
          r.data = buffer(l, const_cast<void*>(data), bytes);
          r.data->send(kServerEnd, kPayloadSlot + static_cast<std::uint64_t>(tag));
        }
      } else {
        r.data = buffer(l, const_cast<void*>(data), bytes);
        r.data->send(kWorkerEnd, kReplySlot + static_cast<std::uint64_t>(tag));
      }
    } catch (const std::exception& e) {
      r.failed = blame(to, e.what());
    }
    return r;
  }
  /// A worker's receive of a server's reply.
  Request irecv(void* data, std::size_t bytes, int from, int tag) {
    Request r;
    try {
      r.data = buffer(link(from), data, bytes);
      r.data->recv(kServerEnd, kReplySlot + static_cast<std::uint64_t>(tag));
    } catch (const std::exception& e) {
      r.failed = blame(from, e.what());
    }
    return r;
  }

  /// True (and `m` filled) when a worker's header has arrived; never blocks.
  bool probe(Message& m) { return links_->next(m); }
  /// Receives the payload of `m` into `data` (a control message's value comes from its header).
  void receive(Message& m, void* data) {
    if (m.tag >= kLearningRateTag) {
      if (m.bytes == sizeof(double)) std::memcpy(data, &m.value, sizeof(double));
      return;
    }
    try {
      Buffer b = buffer(link(m.source), data, m.bytes);
      b->recv(kWorkerEnd, kPayloadSlot + static_cast<std::uint64_t>(m.tag));
      b->waitRecv(options_.timeout);
    } catch (const std::exception& e) {
      abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", rank(), ": the push from worker rank ",
                                       m.source, " failed: ", blame(m.source, e.what())));
    }
  }

  bool test(Request& r) const noexcept { return r.done; }
  bool test_all(std::span<Request> rs) const noexcept {
    for (const Request& r : rs)
      if (!r.done) return false;
    return true;
  }
  /// Waits for every request (blocking: Gloo's threads move the bytes); a failure or the
  /// deadline calls on_timeout(why) (which does not return).
  /// on_timeout(why) may return (the failure is tolerated): wait_all then returns false.
  template <class OnTimeout>
  bool wait_all(std::span<Request> rs, std::chrono::steady_clock::time_point deadline, OnTimeout&& on_timeout,
                std::size_t = 0) {
    bool ok = true;
    for (Request& r : rs) {
      if (r.done) continue;
      const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()),
                                 std::chrono::milliseconds(1));
      std::string why = r.failed;
      if (why.empty()) {
        try {
          if (r.header && !r.header->waitSend(left)) why = "aborted";
          if (why.empty() && r.data && !(r.send ? r.data->waitSend(left) : r.data->waitRecv(left))) why = "aborted";
        } catch (const std::exception& e) {
          why = e.what();
        }
      }
      r.done = true;  // completed, or failed for good
      if (!why.empty()) {
        on_timeout(why);
        ok = false;
      }
    }
    return ok;
  }
  [[noreturn]] void abort(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(124);
  }

 private:
  static int& instances() {
    static int n = 0;
    return n;
  }
  static runtime::ProcessInfo alone(runtime::ProcessInfo p) {
    p.rank = 0;
    p.world_size = 1;
    return p;
  }
  std::string slot_key(int slot) const { return Links::slot_key(prefix_, slot); }

  /// This process's link to world rank `peer`: a worker's, on a server; a server's, on a worker.
  Links::Link& link(int peer) {
    const auto& peers = is_server() ? roles_.workers : roles_.servers;
    const auto at = std::find(peers.begin(), peers.end(), peer);
    STRATA_REQUIRE(at != peers.end(), invalid_argument, "strata.ps", "rank ", rank(), " has no link to rank ", peer,
                   is_server() ? ": a server talks to workers only" : ": a worker talks to servers only");
    return (*links_)[static_cast<std::size_t>(at - peers.begin())];
  }
  static Buffer buffer(Links::Link& l, void* p, std::size_t bytes) { return l.pair->context()->createUnboundBuffer(p, bytes); }
  std::string blame(int peer, const std::string& what) const {
    const char st = peer_state(peer);
    return what + (runtime::is_gone(st) ? " (rank " + std::to_string(peer) + " is gone)"
                   : runtime::is_stopped(st) ? " (rank " + std::to_string(peer) + " is stopped)" : "");
  }

  runtime::ProcessInfo info_;
  std::string prefix_;
  collective::Gloo world_;
  Roles roles_;
  collective::Options options_;
  std::unique_ptr<collective::Gloo> group_;
  bool joined_job_ = false;
  std::optional<Links> links_;  // made once this process's rank is known (a joiner's: from the store)
};

template <>
inline constexpr bool has_transport<collective::Gloo> = true;
/// Joiners meet the job through its store (admit_workers).
template <>
inline constexpr bool enable_admits_workers<Transport<collective::Gloo>> = true;

}  // namespace strata::ps

#endif  // STRATA_HAS_GLOO

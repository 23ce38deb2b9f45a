/// \file
/// ps::Transport<collective::Gloo>: the messages of a ParameterServerStrategy over Gloo's TCP
/// pairs, for jobs started by strata-run (no MPI). Gloo moves bytes on its own I/O threads,
/// so nothing here polls: a worker blocks on its replies, and a server's listener thread
/// blocks on the next request header from any worker and queues it for the request loop.
///
/// A worker's message to a server is a 24-byte header (tag, payload bytes, a value: the
/// learning rate) on one slot, then, for a push, the payload on the partition's slot; a
/// server's reply is the payload alone on the partition's reply slot. A peer that dies
/// closes its connection: the waits on it fail at once and the error names it.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_GLOO
#error "ParameterServerStrategy<collective::Gloo> needs Gloo: configure strata with -Dgloo=enabled (Debian: libgloo-dev), or by hand: -DSTRATA_HAS_GLOO=1 -lgloo"
#else

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/runtime/process.hpp>
#include <strata/strategy/parameter_server/backoff.hpp>
#include <strata/strategy/parameter_server/roles.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/strategy/parameter_server/transport.hpp>

namespace strata::ps {

template <>
class Transport<collective::Gloo> {
  struct Header {
    std::int32_t tag = 0;
    std::int32_t reserved = 0;
    std::uint64_t bytes = 0;
    double value = 0;
  };
  static constexpr std::uint64_t kHeaderSlot = 1, kPayloadSlot = std::uint64_t{1} << 20,
                                 kReplySlot = std::uint64_t{1} << 21;
  using Buffer = std::shared_ptr<gloo::transport::UnboundBuffer>;

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
  struct Message {
    int source = -1;
    int tag = 0;
    std::size_t bytes = 0;
    double value = 0;
  };

  explicit Transport(int requested_servers, collective::Options o = collective::Options::from_env())
      : info_(runtime::detect_process()), prefix_("ps" + std::to_string(instances()++)),
        world_(info_, prefix_ + ".world", o), roles_(Roles::of(world_.size(), requested_servers)), options_(o),
        p2p_(info_, prefix_ + ".p2p", o) {
    runtime::ProcessInfo mine = info_;
    mine.rank = roles_.index_of(info_.rank);
    mine.world_size = static_cast<int>((is_server() ? roles_.servers : roles_.workers).size());
    group_ = std::make_unique<collective::Gloo>(mine, prefix_ + (is_server() ? ".servers" : ".workers"), o);
    if (is_server()) {
      header_ = buffer(&incoming_, sizeof incoming_);
      listener_ = std::thread([this] { listen(); });
    }
  }
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport() {
    stop_ = true;
    if (listener_.joinable()) {
      {
        std::lock_guard lock(mu_);
        header_->abortWaitRecv();
      }
      listener_.join();
    }
  }

  const Roles& roles() const noexcept { return roles_; }
  int rank() const noexcept { return info_.rank; }
  bool is_server() const { return roles_.is_server(info_.rank); }
  collective::Gloo& world() noexcept { return world_; }
  collective::Gloo& group() noexcept { return *group_; }
  std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }
  char peer_state(int r) const { return world_.peer_state(r); }

  /// To a server: the header, then (a push) the payload. To a worker: the payload (a reply).
  /// A peer whose connection has closed already fails the request, which wait_all reports.
  Request isend(const void* data, std::size_t bytes, int to, int tag) {
    Request r;
    r.send = true;
    try {
      if (roles_.is_server(to)) {
        r.header_bytes = std::make_shared<Header>();
        r.header_bytes->tag = tag;
        r.header_bytes->bytes = bytes;
        if (tag >= kLearningRateTag) {  // control: the value travels in the header
          if (bytes == sizeof(double)) std::memcpy(&r.header_bytes->value, data, sizeof(double));
        }
        r.header = buffer(r.header_bytes.get(), sizeof(Header));
        r.header->send(to, kHeaderSlot);
        if (tag < kLearningRateTag && bytes > 0) {
          r.data = buffer(const_cast<void*>(data), bytes);
          r.data->send(to, kPayloadSlot + static_cast<std::uint64_t>(tag));
        }
      } else {
        r.data = buffer(const_cast<void*>(data), bytes);
        r.data->send(to, kReplySlot + static_cast<std::uint64_t>(tag));
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
      r.data = buffer(data, bytes);
      r.data->recv(from, kReplySlot + static_cast<std::uint64_t>(tag));
    } catch (const std::exception& e) {
      r.failed = blame(from, e.what());
    }
    return r;
  }

  /// True (and `m` filled) when a worker's header has arrived; never blocks.
  bool probe(Message& m) {
    std::lock_guard lock(mu_);
    if (!error_.empty()) abort(strata::detail::error_text("strata.ps.peer_lost", "server rank ", rank(), ": ", error_));
    if (queue_.empty()) return false;
    m = queue_.front();
    queue_.pop_front();
    return true;
  }
  /// Receives the payload of `m` into `data` (a control message's value comes from its header).
  void receive(Message& m, void* data) {
    if (m.tag >= kLearningRateTag) {
      if (m.bytes == sizeof(double)) std::memcpy(data, &m.value, sizeof(double));
      return;
    }
    Buffer b = buffer(data, m.bytes);
    b->recv(m.source, kPayloadSlot + static_cast<std::uint64_t>(m.tag));
    try {
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
  Buffer buffer(void* p, std::size_t bytes) {
    return p2p_.context()->createUnboundBuffer(p, bytes);
  }
  std::string blame(int peer, const std::string& what) const {
    const char st = peer_state(peer);
    return what + (runtime::is_gone(st) ? " (rank " + std::to_string(peer) + " is gone)"
                   : runtime::is_stopped(st) ? " (rank " + std::to_string(peer) + " is stopped)" : "");
  }

  // Server: receives every header from any worker and queues it, until stopped or a worker's
  // connection fails (then probe() reports which).
  void listen() {
    const Header& h = incoming_;
    std::vector<int> workers = roles_.workers;
    while (!stop_) {
      int src = -1;
      try {
        header_->recv(workers, kHeaderSlot);  // throws too when a worker's connection has closed
        if (!header_->waitRecv(&src, std::chrono::hours(24 * 365))) return;  // aborted: shutting down
      } catch (const std::exception& e) {
        // A worker's connection died: report each worker found gone (the request loop decides
        // whether the job can go on) and listen to the others on a fresh buffer.
        std::vector<int> gone;
        for (int attempt = 0; attempt < 20 && gone.empty(); ++attempt) {
          if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          for (int w : workers)
            if (runtime::is_gone(peer_state(w))) gone.push_back(w);
        }
        std::lock_guard lock(mu_);
        if (gone.empty()) {
          error_ = std::string("a worker's connection failed: ") + e.what();
          return;
        }
        for (int w : gone) {
          queue_.push_back(Message{w, kWorkerLostTag, 0, 0});
          std::erase(workers, w);
        }
        if (workers.empty() || stop_) return;
        header_ = buffer(&incoming_, sizeof incoming_);
        continue;
      }
      std::lock_guard lock(mu_);
      queue_.push_back(Message{src, h.tag, static_cast<std::size_t>(h.bytes), h.value});
    }
  }

  runtime::ProcessInfo info_;
  std::string prefix_;
  collective::Gloo world_;
  Roles roles_;
  collective::Options options_;
  collective::Gloo p2p_;
  std::unique_ptr<collective::Gloo> group_;
  std::mutex mu_;
  std::deque<Message> queue_;
  std::string error_;
  Header incoming_;  // the listener's receive buffer
  Buffer header_;
  std::atomic<bool> stop_{false};
  std::thread listener_;
};

template <>
inline constexpr bool has_transport<collective::Gloo> = true;

}  // namespace strata::ps

#endif  // STRATA_HAS_GLOO

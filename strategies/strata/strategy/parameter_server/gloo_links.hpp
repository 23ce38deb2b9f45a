/// \file
/// ps::detail::GlooLinks: a ParameterServerStrategy process's connections over Gloo, for
/// ps::Transport<collective::Gloo>. Each server and each worker share a link: a two-rank Gloo
/// communicator of their own ("<prefix>.link.s<k>.w<i>": the server is its rank 0, the
/// worker its rank 1), built in ascending (server, worker) order by both ends, so no two wait
/// on each other. On a server, a listener thread per link receives each request header from
/// its worker and queues it for the request loop; a link that closes (its worker died) queues
/// that worker's loss. Once a server admits joiners, an acceptor thread builds the link of
/// each worker slot claimed in the job's TCP store and queues the joiner's arrival.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_GLOO
#error "ps::detail::GlooLinks needs Gloo: configure strata with -Dgloo=enabled (Debian: libgloo-dev), or by hand: -DSTRATA_HAS_GLOO=1 -lgloo"
#else

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/runtime/process.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/strategy/parameter_server/shards.hpp>  // kWorkerJoinedTag, kWorkerLostTag
#include <strata/support/check.hpp>

namespace strata::ps::detail {

class GlooLinks {
 public:
  /// What a worker sends first on its link for every request: the tag, the payload's bytes,
  /// a value (the learning rate of a control message).
  struct Header {
    std::int32_t tag = 0;
    std::int32_t reserved = 0;
    std::uint64_t bytes = 0;
    double value = 0;
  };
  /// A request header that arrived at a server, or a worker's arrival or loss.
  struct Arrival {
    int source = -1;
    int tag = 0;
    std::size_t bytes = 0;
    double value = 0;
  };
  using Buffer = std::shared_ptr<gloo::transport::UnboundBuffer>;
  static constexpr int kServerEnd = 0, kWorkerEnd = 1;  // the ranks of a link's two ends
  static constexpr std::uint64_t kHeaderSlot = 1;

  /// One server and one worker's connection, and (on the server) the thread serving it.
  struct Link {
    int peer = -1;  ///< the world rank at the other end
    std::unique_ptr<collective::Gloo> pair;
    Header incoming;  ///< the listener's receive buffer
    Buffer header;
    std::thread listener;
  };

  /// `me`: this process as the job knows it (its links listen where its communicators do);
  /// `prefix` names the strategy instance's links.
  GlooLinks(const runtime::ProcessInfo& me, bool server, std::string prefix, collective::Options o)
      : me_(me), server_(server), prefix_(std::move(prefix)), options_(std::move(o)) {}
  GlooLinks(const GlooLinks&) = delete;
  GlooLinks& operator=(const GlooLinks&) = delete;
  ~GlooLinks() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (auto* links : {&links_, &joined_})
      for (auto& l : *links) {
        if (!l->listener.joinable()) continue;
        {
          std::lock_guard lock(mu_);
          l->header->abortWaitRecv();
        }
        l->listener.join();
      }
  }

  /// Builds the link between server `s` and worker `w` (indices among the servers and the
  /// workers) to world rank `peer`; a server then listens on it.
  void add(int peer, int s, int w) {
    auto link = std::make_unique<Link>();
    link->peer = peer;
    link->pair = connect(s, w, options_);
    links_.push_back(std::move(link));
    if (server_) serve(*links_.back());
  }
  /// The k-th link (in the order built, then admitted).
  Link& operator[](std::size_t k) { return *links_.at(k); }
  const Link& operator[](std::size_t k) const { return *links_.at(k); }
  std::size_t size() const noexcept { return links_.size(); }

  /// True (and `m` filled) when something arrived; never blocks.
  bool next(Arrival& m) {
    std::lock_guard lock(mu_);
    if (queue_.empty()) return false;
    m = queue_.front();
    queue_.pop_front();
    return true;
  }

  /// A server: from now on, builds the link of each worker slot claimed in `store` from
  /// `first` on (server index `s`; a slot's world rank is `ranks` + its place past `first`).
  void accept_joiners(runtime::TcpStore& store, int first, int ranks, int s) {
    if (accepting()) return;
    acceptor_ = std::thread([this, &store, first, ranks, s] { accept(store, first, ranks, s); });
  }
  bool accepting() const noexcept { return acceptor_.joinable(); }
  /// The request loop, on kWorkerJoinedTag from `r`: r's link joins the others; false if no
  /// worker r has joined.
  bool admit(int r) {
    std::lock_guard lock(mu_);
    const auto at = std::find_if(joined_.begin(), joined_.end(), [r](const auto& l) { return l->peer == r; });
    if (at == joined_.end()) return false;
    links_.push_back(std::move(*at));
    joined_.erase(at);
    return true;
  }
  /// The store's key of worker slot `slot` of the links named `prefix`, which a joiner claims.
  static std::string slot_key(const std::string& prefix, int slot) { return prefix + ".slot/" + std::to_string(slot); }

 private:
  std::unique_ptr<collective::Gloo> connect(int s, int w, const collective::Options& o) {
    runtime::ProcessInfo p = me_;
    p.rank = server_ ? kServerEnd : kWorkerEnd;
    p.world_size = 2;
    if (!device_) device_ = collective::Gloo::device_for(p);  // one event loop for every link, as one mesh has
    return std::make_unique<collective::Gloo>(p, prefix_ + ".link.s" + std::to_string(s) + ".w" + std::to_string(w), o,
                                              device_);
  }

  // Builds the link of each worker slot claimed from `first` on, in order, until stopped. A
  // slot whose link fails (its joiner died, or is not of this job) is skipped.
  void accept(runtime::TcpStore& store, int first, int ranks, int s) {
    for (int slot = first; !stop_;) {
      bool claimed = false;
      try {
        claimed = store.check(slot_key(prefix_, slot));
      } catch (const std::exception&) {
        return;  // the store is gone: so is the job
      }
      if (!claimed) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      auto link = std::make_unique<Link>();
      link->peer = ranks + slot - first;
      try {
        collective::Options o = options_;  // a joiner that never comes does not hold up the end of the job
        o.rendezvous_abandoned = [this] { return stop_ ? std::string("the server is shutting down") : std::string(); };
        link->pair = connect(s, slot, o);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[strata.ps] server rank %d: worker slot %d claimed, but its link failed: %s\n", me_.rank,
                     slot, e.what());
        ++slot;
        continue;
      }
      {
        std::lock_guard lock(mu_);
        queue_.push_back(Arrival{link->peer, kWorkerJoinedTag, 0, 0});
        serve(*link);
        joined_.push_back(std::move(link));
      }
      ++slot;
    }
  }

  // A server's listener on link `l`: its header buffer, then the thread that fills it.
  void serve(Link& l) {
    l.header = l.pair->context()->createUnboundBuffer(&l.incoming, sizeof l.incoming);
    l.listener = std::thread([this, &l] { listen(l); });
  }

  // Receives each header from the link's worker and queues it, until stopped or the link
  // closes: then the worker is lost (the request loop decides whether the job goes on).
  void listen(Link& l) {
    while (!stop_) {
      try {
        l.header->recv(kWorkerEnd, kHeaderSlot);  // throws too when the link has closed
        if (!l.header->waitRecv(std::chrono::hours(24 * 365))) return;  // aborted: shutting down
      } catch (const std::exception&) {
        std::lock_guard lock(mu_);
        if (!stop_) queue_.push_back(Arrival{l.peer, kWorkerLostTag, 0, 0});
        return;
      }
      std::lock_guard lock(mu_);
      queue_.push_back(Arrival{l.peer, l.incoming.tag, static_cast<std::size_t>(l.incoming.bytes), l.incoming.value});
    }
  }

  runtime::ProcessInfo me_;
  bool server_;
  std::string prefix_;
  collective::Options options_;
  std::shared_ptr<gloo::transport::Device> device_;  // the links' (declared first: they go first)
  std::vector<std::unique_ptr<Link>> links_;   // a server's to each worker, a worker's to each server
  std::vector<std::unique_ptr<Link>> joined_;  // a server's to joiners not admitted yet (mu_)
  std::mutex mu_;
  std::deque<Arrival> queue_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
};

}  // namespace strata::ps::detail

#endif

/// \file
/// ps::worker::State<T>: what every part of a worker rank shares — the transport and the
/// shards, its requests in flight with the server each goes to (posted, then waited for
/// together, a timeout naming the servers still owed), what it moved (TransferStats), and
/// the messages of its table blocks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <strata/runtime/process_state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>
#include <strata/support/error.hpp>

namespace strata::ps {

/// What a worker moved through the servers, summed over its steps (push_pull calls).
struct TransferStats {
  std::int64_t steps = 0;
  double pushed_bytes = 0;  ///< gradients sent to the servers
  double pulled_bytes = 0;  ///< replies received: new values, or summed gradients
  double touched_bytes = 0;  ///< the tables' share of the pushes at the least: the rows touched with their numbers
  double looked_up_bytes = 0;  ///< remote tables: the rows looked up with their requests (in pushed and pulled too)
};

namespace worker {

/// One table block's messages: the push [k, flags, k row numbers, k rows], the reply's row
/// count, then its [c row numbers, c rows]; and a remote lookup's [id, k, k row numbers].
struct TableBlock {
  std::vector<std::int64_t> push, reply, lookup;
  std::int64_t count = 0;
};

inline std::size_t words_for(std::size_t bytes) { return (bytes + 7) / 8; }

template <class T>
struct State {
  State(T& transport, const Shards& sh, bool on_servers, bool by_rows)
      : t(transport), shards(sh), update_on_servers(on_servers), sparse_tables(by_rows) {}

  T& t;
  const Shards& shards;
  bool update_on_servers;
  bool sparse_tables = false;
  TransferStats stats;
  std::vector<TableBlock> tables;  // by partition id (table blocks only)
  std::size_t bytes = 0;           // pushed and pulled by the requests in flight

  /// Whether variable v goes by rows: a row-sparse table, under Sync.
  bool by_rows(std::size_t v) const {
    return sparse_tables && shards.partitions[shards.of_variable[v].front()].row_width > 0;
  }
  /// Sized before any message of a step points into it (never resized after).
  void ensure_tables() {
    if (tables.size() < shards.partitions.size()) tables.resize(shards.partitions.size());
  }
  int server_rank(const Partition& q) const { return t.roles().servers[static_cast<std::size_t>(q.server)]; }

  void post(typename T::Request r, int server) {
    requests_.push_back(r);
    peers_.push_back(server);
  }

  // The servers report a stalled step first (after the timeout); a worker waits a little longer.
  void wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + t.timeout() + t.timeout() / 4 + std::chrono::seconds(1);
    t.wait_all(requests_, deadline, [&](const std::string& why) { t.abort(timeout_message(what, why)); }, bytes);
    requests_.clear();
    bytes = 0;
    peers_.clear();
  }

 private:
  std::string timeout_message(const char* what, const std::string& why) {
    std::ostringstream os;
    os << strata::detail::error_text("strata.ps.timeout") << "worker rank " << t.rank() << ": " << what
       << " not complete (" << why << "); waiting for";
    std::vector<int> named;
    for (std::size_t k = 0; k < requests_.size(); ++k) {
      const int s = peers_[k];
      if (t.test(requests_[k]) || std::find(named.begin(), named.end(), s) != named.end()) continue;
      named.push_back(s);
      os << " server rank " << s << runtime::describe_state(runtime::settled_state([&] { return t.peer_state(s); }));
    }
    if (named.empty()) os << " the servers";
    return os.str() + "; aborting the job";
  }

  std::vector<typename T::Request> requests_;
  std::vector<int> peers_;  // the server rank of each request
};

}  // namespace worker
}  // namespace strata::ps

/// \file
/// ps::server::Lookups<T>: a server's answers to remote tables' lookups — a worker's
/// [id, k, k row numbers in the block], checked before anything is read from it, answered with
/// the k rows' values (kLookupReplyTag). docs/design/sparse_tables.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <strata/strategy/parameter_server/server/state.hpp>
#include <strata/strategy/parameter_server/shards.hpp>  // the tags
#include <strata/support/error.hpp>

namespace strata::ps::server {

template <class T>
class Lookups {
 public:
  explicit Lookups(State<T>& st) : st_(st) {}

  /// Worker w's lookup. In Sync it comes between the worker's steps, so it reads the values of
  /// the last update.
  void on_lookup(int w, typename T::Message& m) {
    const auto refuse = [&](const auto&... why) {
      st_.t.abort(strata::detail::error_text("strata.ps", "server rank ", st_.t.rank(), ": worker rank ", m.source,
                                             " sent a malformed lookup (", why..., "); aborting the job"));
    };
    const std::size_t most = static_cast<std::size_t>(2 + st_.most_rows) * 8;
    if (!st_.s.remote_tables) refuse("this job's tables are not remote");
    if (m.bytes < 24 || m.bytes > most || m.bytes % 8 != 0) refuse(m.bytes, " bytes, this server's lookups take 24 to ", most);
    in_.resize(m.bytes / 8);
    st_.t.receive(m, in_.data());
    const std::int64_t id = in_[0], k = in_[1];
    Held<T>* h = id >= 0 ? st_.find(static_cast<std::size_t>(id)) : nullptr;
    if (h == nullptr || h->rows == 0) refuse("partition ", id, " is no table block of this server");
    const std::int64_t n = h->value.dim(0);
    if (k < 1 || k > n || m.bytes != static_cast<std::size_t>(2 + k) * 8)
      refuse(k, " rows claimed in ", m.bytes, " bytes, a block of ", n, " rows");
    for (std::int64_t j = 0; j < k; ++j)
      if (const std::int64_t r = in_[static_cast<std::size_t>(2 + j)]; r < 0 || r >= n)
        refuse("row ", r, " of a block of ", n, " rows");
    st_.complete_replies_to(*h, m.source);  // its last lookup here (received before it asked again)
    const std::size_t row_bytes = static_cast<std::size_t>(h->rows) * size_of(h->value.dtype());
    std::vector<char>& out = h->lookups[static_cast<std::size_t>(w)];
    out.resize(static_cast<std::size_t>(k) * row_bytes);
    copy_rows(h->value, in_.data() + 2, k, static_cast<std::int64_t>(row_bytes), out.data());
    st_.send_reply(*h, out.data(), out.size(), m.source, kLookupReplyTag);
  }

 private:
  State<T>& st_;
  std::vector<std::int64_t> in_;  // the lookup being answered
};

}  // namespace strata::ps::server

/// \file
/// The membership of an elastic job (docs/design/elastic.md): the authority that the job's TCP
/// store server runs. Workers join over their store connection, which is their lease; a closed
/// connection is a lost worker, an eviction a stopped one. Changes are gathered for a settle
/// window and published as the next generation's View: the survivors in their old order, then
/// the joiners. Below min_workers the job ends, naming who is left. A process that is not a
/// member of the current view is refused, with the reason it was dropped (fencing by
/// generation: no split brain). Pure state: the server passes the time and its connections in.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/runtime/store_protocol.hpp>
#include <strata/support/check.hpp>

namespace strata::runtime {

/// One generation's membership, as the store publishes it.
struct View {
  enum class State : std::uint32_t { member = 0, ended = 1, refused = 2 };
  std::uint64_t generation = 0;
  State state = State::member;
  std::vector<std::string> members;  ///< rank = index; for ended or refused: the reason, alone
  std::string reason() const { return state == State::member || members.empty() ? std::string() : members.front(); }
  /// The rank of `id` in this view, or -1.
  int rank_of(std::string_view id) const {
    if (state != State::member) return -1;
    const auto it = std::find(members.begin(), members.end(), id);
    return it == members.end() ? -1 : static_cast<int>(it - members.begin());
  }
  int size() const { return state == State::member ? static_cast<int>(members.size()) : 0; }
};

namespace membership_wire {
/// The largest view a frame carries.
inline constexpr std::size_t kMaxMembers = 4096;

inline std::string encode(const View& v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v.generation >> (8 * i)) & 0xff);
  store_protocol::detail::put_u32(s, static_cast<std::uint32_t>(v.state));
  store_protocol::detail::put_u32(s, static_cast<std::uint32_t>(v.members.size()));
  for (const auto& m : v.members) {
    store_protocol::detail::put_u32(s, static_cast<std::uint32_t>(m.size()));
    s += m;
  }
  return s;
}
/// Parses a whole view frame; false (with `why`) when it is malformed or beyond the bounds.
inline bool decode(std::string_view in, View& out, std::string& why) {
  if (in.size() < 16) return why = "a view of " + std::to_string(in.size()) + " bytes", false;
  out.generation = 0;
  for (int i = 0; i < 8; ++i) out.generation |= std::uint64_t(static_cast<unsigned char>(in[static_cast<std::size_t>(i)])) << (8 * i);
  const std::uint32_t state = store_protocol::detail::get_u32(in, 8), n = store_protocol::detail::get_u32(in, 12);
  if (state > 2) return why = "a view state " + std::to_string(state), false;
  if (n > kMaxMembers) return why = "a view of " + std::to_string(n) + " members (at most " + std::to_string(kMaxMembers) + ")", false;
  out.state = static_cast<View::State>(state);
  out.members.clear();
  std::size_t at = 16;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (in.size() < at + 4) return why = "a view cut short", false;
    const std::uint32_t len = store_protocol::detail::get_u32(in, at);
    if (len > store_protocol::kMaxKey || in.size() < at + 4 + len) return why = "a member id cut short or too long", false;
    out.members.emplace_back(in.substr(at + 4, len));
    at += 4 + len;
  }
  if (at != in.size()) return why = "a view with " + std::to_string(in.size() - at) + " bytes left over", false;
  return true;
}
inline std::string encode_generation(std::uint64_t g, std::string_view more = {}) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((g >> (8 * i)) & 0xff);
  return s.append(more);
}
inline bool decode_generation(std::string_view in, std::uint64_t& g, std::string& more) {
  if (in.size() < 8) return false;
  g = 0;
  for (int i = 0; i < 8; ++i) g |= std::uint64_t(static_cast<unsigned char>(in[static_cast<std::size_t>(i)])) << (8 * i);
  more.assign(in.substr(8));
  return true;
}
}  // namespace membership_wire

/// What bounds an elastic job's membership.
struct MembershipOptions {
  int min_workers = 1, max_workers = 1;
  int initial_workers = 1;  ///< the first view waits for this many (strata-run's -np)
  std::chrono::milliseconds settle{100};        ///< changes closer than this become one generation
  std::chrono::milliseconds start_wait{30000};  ///< with fewer than initial_workers: begin after this, if min_workers are in
};

class Membership {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Membership(MembershipOptions o) : o_(o) {
    STRATA_CHECK(o.min_workers >= 1 && o.min_workers <= o.max_workers, "elastic: min_workers ", o.min_workers,
                 " and max_workers ", o.max_workers, " must satisfy 1 <= min <= max");
    STRATA_CHECK(o.initial_workers >= o.min_workers && o.initial_workers <= o.max_workers, "elastic: ", o.initial_workers,
                 " initial workers outside min_workers..max_workers (", o.min_workers, "..", o.max_workers, ")");
  }

  const View& view() const noexcept { return view_; }
  bool ended() const noexcept { return view_.state == View::State::ended; }

  /// `id` asks to join over connection `conn`. Empty: it is pending, and is answered by the
  /// first view that includes it; else the reason it is refused.
  std::string join(const std::string& id, int conn, Clock::time_point now) {
    if (ended()) return view_.reason();
    if (id.empty()) return "an empty member id";
    if (view_.rank_of(id) >= 0 || std::find(joiners_.begin(), joiners_.end(), id) != joiners_.end())
      return "'" + id + "' is already a member";
    const std::size_t will_have = view_.members.size() - lost_.size() + joiners_.size();
    if (will_have >= static_cast<std::size_t>(o_.max_workers))
      return "the job has max_workers=" + std::to_string(o_.max_workers) + " members";
    joiners_.push_back(id);
    conn_of_[id] = conn;
    changed(now);
    return {};
  }

  /// The connection `conn` closed: its member (if any) is lost.
  void lost(int conn, Clock::time_point now) {
    for (auto it = conn_of_.begin(); it != conn_of_.end(); ++it) {
      if (it->second != conn) continue;
      const std::string id = it->first;
      conn_of_.erase(it);
      if (const auto j = std::find(joiners_.begin(), joiners_.end(), id); j != joiners_.end()) {
        joiners_.erase(j);  // left before it was admitted
      } else if (view_.rank_of(id) >= 0 && lost_.insert(id).second) {
        why_[id] = "its store connection closed (the process ended)";
        changed(now);
      }
      return;
    }
  }

  /// Member `by` of generation `g` reports that `target` does not answer. Empty, or the reason
  /// the report is refused.
  std::string evict(std::uint64_t g, const std::string& by, const std::string& target, Clock::time_point now) {
    if (const std::string r = fence(g, by); !r.empty()) return r;
    if (dropped_.count(target)) return {};  // another member's report dropped it already
    if (view_.rank_of(target) < 0) return "'" + target + "' is not a member of generation " + std::to_string(view_.generation);
    if (lost_.insert(target).second) {
      why_[target] = "evicted at the report of " + by + ": it did not answer";
      if (const auto c = conn_of_.find(target); c != conn_of_.end()) {
        to_close_.push_back(c->second);
        conn_of_.erase(c);
      }
      changed(now);
    }
    return {};
  }

  /// Empty when `id` may act in generation `g` (a member of the current view, or of the one
  /// being settled); else why not.
  std::string fence(std::uint64_t g, const std::string& id) const {
    if (ended()) return view_.reason();
    if (g > view_.generation) return "generation " + std::to_string(g) + " has not been published";
    if (view_.rank_of(id) >= 0 && !lost_.count(id)) return {};
    if (const auto w = dropped_.find(id); w != dropped_.end()) return w->second;
    if (lost_.count(id)) return "'" + id + "' is being dropped: " + why_.at(id);
    return "'" + id + "' is not a member of generation " + std::to_string(view_.generation);
  }

  /// When the pending changes settle (the server's poll deadline), if any are pending.
  std::optional<Clock::time_point> deadline() const {
    if (ended() || (joiners_.empty() && lost_.empty())) return std::nullopt;
    if (view_.generation == 0 && static_cast<int>(joiners_.size()) < o_.initial_workers) return first_join_ + o_.start_wait;
    return last_change_ + o_.settle;
  }

  /// Publishes the next generation once the pending changes have settled; true when it did.
  bool settle(Clock::time_point now) {
    const auto d = deadline();
    if (!d || now < *d) return false;
    if (view_.generation == 0 && static_cast<int>(joiners_.size()) < o_.min_workers) {
      end("fewer than min_workers=" + std::to_string(o_.min_workers) + " joined within " +
          std::to_string(o_.start_wait.count()) + " ms: " + list(joiners_));
      return true;
    }
    View next;
    next.generation = view_.generation + 1;
    for (const auto& m : view_.members) {
      if (!lost_.count(m)) {
        next.members.push_back(m);
      } else {
        dropped_[m] = "dropped at generation " + std::to_string(next.generation) + ": " + why_[m];
      }
    }
    for (const auto& j : joiners_) next.members.push_back(j);
    joiners_.clear();
    lost_.clear();
    if (static_cast<int>(next.members.size()) < o_.min_workers) {
      end("below min_workers=" + std::to_string(o_.min_workers) + " at generation " + std::to_string(next.generation) +
          ": left " + list(next.members));
      return true;
    }
    view_ = std::move(next);
    return true;
  }

  /// Connections of evicted members, for the server to close (once each).
  std::vector<int> take_to_close() { return std::exchange(to_close_, {}); }

 private:
  void changed(Clock::time_point now) {
    if (joiners_.size() == 1 && view_.generation == 0) first_join_ = now;
    last_change_ = now;
  }
  void end(const std::string& why) {
    view_.state = View::State::ended;
    view_.generation += 1;
    view_.members = {"the elastic job ended: " + why};
    joiners_.clear();
    lost_.clear();
  }
  static std::string list(const std::vector<std::string>& ids) {
    std::string s = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + ids[i];
    return s + "]";
  }

  MembershipOptions o_;
  View view_;
  std::vector<std::string> joiners_;                 // pending, in arrival order
  std::set<std::string> lost_;                       // pending removals
  std::map<std::string, int> conn_of_;               // each member's lease
  std::map<std::string, std::string> why_, dropped_;  // why a member goes, and went
  std::vector<int> to_close_;
  Clock::time_point first_join_{}, last_change_{};
};

}  // namespace strata::runtime

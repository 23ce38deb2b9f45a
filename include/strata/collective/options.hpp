/// \file
/// What every collective policy shares: its deadline, the debug fingerprint check, and the
/// fingerprint itself (what a rank believes it is calling).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>  // std::strtod
#include <cstring>  // memcpy, strnlen
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include <strata/collective/detail/wait_policy.hpp>  // long_spin_budget
#include <strata/collective/reduce_op.hpp>
#include <strata/support/check.hpp>
#include <strata/support/environment.hpp>
#include <strata/tensor/dtype.hpp>

namespace strata::collective {

/// Per-group settings. The defaults come from the environment:
/// STRATA_COLLECTIVE_TIMEOUT (seconds, default 300) and STRATA_COLLECTIVE_DEBUG=1.
struct Options {
  std::chrono::milliseconds timeout{300'000};
  bool check_fingerprints = false;
  /// While a communicator's rendezvous waits for its peers: a reason to give up at once, or
  /// empty to go on waiting (an elastic generation that a newer one replaced; Gloo over the
  /// TCP store asks it every 5 ms). Unset: wait up to the timeout.
  std::function<std::string()> rendezvous_abandoned;

  static Options from_env() {
    Options o;
    if (const char* t = environment::get("STRATA_COLLECTIVE_TIMEOUT")) {
      char* end = nullptr;
      const double s = std::strtod(t, &end);
      STRATA_CHECK(end != t && *end == '\0' && s > 0, "STRATA_COLLECTIVE_TIMEOUT='", t,
                   "' is not a positive number of seconds");
      o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
    }
    if (const char* d = environment::get("STRATA_COLLECTIVE_DEBUG")) o.check_fingerprints = std::string(d) != "0";
    (void)detail::long_spin_budget();  // a bad STRATA_SPIN_US fails here, not inside a barrier
    return o;
  }
};

/// The kinds of collective, for fingerprints and messages.
enum class OpKind : std::uint8_t { allreduce, broadcast, allgather, reduce_scatter, barrier };

constexpr const char* name_of(OpKind k) noexcept {
  switch (k) {
    case OpKind::allreduce: return "allreduce";
    case OpKind::broadcast: return "broadcast";
    case OpKind::allgather: return "allgather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::barrier: return "barrier";
  }
  return "?";
}

/// What one rank called: compared across ranks in debug mode.
struct Fingerprint {
  OpKind kind = OpKind::barrier;
  ReduceOp op = ReduceOp::Sum;
  DType dtype = DType::f32;
  std::uint64_t count = 0;
  int root = 0;
  std::uint64_t seq = 0;

  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
  std::string str() const {
    std::ostringstream os;
    os << name_of(kind) << " #" << seq << " (";
    if (kind == OpKind::allreduce || kind == OpKind::reduce_scatter) os << "op " << name_of(op) << ", ";
    if (kind == OpKind::broadcast) os << "root " << root << ", ";
    os << name_of(dtype) << " x " << count << ")";
    return os.str();
  }

  /// The fingerprint as six words, for exchanging it between ranks.
  static constexpr std::size_t kWords = 6;
  void pack(std::uint64_t* w) const {
    w[0] = static_cast<std::uint64_t>(kind);
    w[1] = static_cast<std::uint64_t>(op);
    w[2] = static_cast<std::uint64_t>(dtype);
    w[3] = count;
    w[4] = static_cast<std::uint64_t>(root);
    w[5] = seq;
  }
  static Fingerprint unpack(const std::uint64_t* w) {
    return {static_cast<OpKind>(w[0]), static_cast<ReduceOp>(w[1]), static_cast<DType>(w[2]), w[3],
            static_cast<int>(w[4]), w[5]};
  }
};

/// The report of rank `a` and rank `b` calling different collectives, naming what differs;
/// where the call sites are known (the desync check's), each call's too.
inline std::string mismatch_message(int a, const Fingerprint& fa, int b, const Fingerprint& fb,
                                    std::string_view site_a = {}, std::string_view site_b = {}) {
  std::ostringstream os;
  auto at = [](std::string_view site) { return site.empty() ? std::string() : " at " + std::string(site); };
  os << strata::detail::error_text("strata.collective.mismatch") << "ranks called different collectives: rank " << a << " called " << fa.str()
     << at(site_a) << ", rank " << b << " called " << fb.str() << at(site_b) << "; differs in:";
  const char* sep = " ";
  auto field = [&](bool differs, const char* name) {
    if (differs) os << std::exchange(sep, ", ") << name;
  };
  field(fa.kind != fb.kind, "collective");
  field(fa.op != fb.op, "op");
  field(fa.dtype != fb.dtype, "dtype");
  field(fa.count != fb.count, "count");
  field(fa.root != fb.root, "root");
  field(fa.seq != fb.seq, "sequence number");
  return os.str();
}

/// What the desync check (Options::check_fingerprints) exchanges for one call: its fingerprint,
/// then its call site in kSiteBytes (the calling thread's flight-recorder label: "file.cpp:line"
/// where the call came from, or a gradient bucket's name; zeros where none).
inline constexpr std::size_t kSiteBytes = 32;
inline constexpr std::size_t kCheckWords = Fingerprint::kWords + kSiteBytes / 8;
inline void pack_checked_call(const Fingerprint& fp, const char* site, std::uint64_t* w) {
  fp.pack(w);
  char* s = reinterpret_cast<char*>(w + Fingerprint::kWords);
  std::memset(s, 0, kSiteBytes);
  if (site) std::memcpy(s, site, ::strnlen(site, kSiteBytes - 1));
}
inline std::string_view site_in(const std::uint64_t* w) {
  const char* s = reinterpret_cast<const char*>(w + Fingerprint::kWords);
  return {s, ::strnlen(s, kSiteBytes)};
}

/// Given every rank's packed call (`size` x kCheckWords words, pack_checked_call), the message
/// naming the first rank whose call differs from `mine` (this is `rank`), both calls' sites,
/// and every rank's call site; "" if all agree.
inline std::string fingerprint_mismatch(int rank, const Fingerprint& mine, const std::uint64_t* all, int size) {
  auto row = [&](int k) { return all + kCheckWords * static_cast<std::size_t>(k); };
  for (int k = 0; k < size; ++k) {
    const Fingerprint theirs = Fingerprint::unpack(row(k));
    if (theirs == mine) continue;
    std::string msg = mismatch_message(rank, mine, k, theirs, site_in(row(rank)), site_in(row(k)));
    msg += "; call sites:";
    for (int r = 0; r < size; ++r) {
      const std::string_view site = site_in(row(r));
      msg += (r ? ", rank " : " rank ") + std::to_string(r) + " " + (site.empty() ? std::string("unknown") : std::string(site));
    }
    return msg;
  }
  return {};
}

}  // namespace strata::collective

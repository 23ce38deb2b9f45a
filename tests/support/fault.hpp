/// \file
/// Fault injection for the tests' programs (the fault suite's job, the resume trainer). A
/// program compiled with -DSTRATA_FAULT_INJECTION=1 honours
///   STRATA_FAULT="rank;step;point;kind[;run][,rank;step;point;kind[;run]...]"
/// at every STRATA_FAULT_POINT(rank, step, "point") it passes: when rank, step and point
/// match (`*` matches any rank or step), the process does `kind` — sigkill, sigterm, sigstop
/// (raises the signal), exit0, exit1 (_Exit), abort, or throw (a strata::error). The kinds
/// skip, stall, nan, shape, dtype and op change what the caller does next, so only a point
/// that names them as handled accepts them (it gets the kind back); anywhere else they are an
/// error, never silently ignored. Without the macro the points compile to nothing. A job that
/// `strata-run --max-restarts` starts again is several runs (STRATA_RESTART_COUNT: 0, 1, ...):
/// a fault fires in run `run` (default 0, the first: the restarts are the recovery), or in
/// every run with STRATA_FAULT_EVERY_RUN=1 (a fault that persists).
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <strata/support/error.hpp>

namespace strata::testing {

struct Fault {
  std::string rank, step, point, kind;  // rank/step: a number or "*"
  std::string run = "0";                // the run it fires in (STRATA_RESTART_COUNT)
};

/// The faults STRATA_FAULT asks for (parsed once); a malformed value is an error naming it.
inline const std::vector<Fault>& requested_faults() {
  static const std::vector<Fault> faults = [] {
    std::vector<Fault> out;
    const char* env = std::getenv("STRATA_FAULT");
    if (!env || !*env) return out;
    const std::string all = env;
    std::size_t at = 0;
    while (at <= all.size()) {
      const std::size_t end = std::min(all.find(',', at), all.size());
      const std::string one = all.substr(at, end - at);
      std::vector<std::string> f;
      std::size_t p = 0;
      while (p <= one.size()) {
        const std::size_t q = std::min(one.find(';', p), one.size());
        f.push_back(one.substr(p, q - p));
        p = q + 1;
      }
      static const char* kinds[] = {"sigkill", "sigterm", "sigstop", "exit0", "exit1", "abort", "throw",
                                    "skip",    "stall",   "nan",     "shape", "dtype", "op"};
      bool known = false;
      for (const char* k : kinds) known = known || ((f.size() == 4 || f.size() == 5) && f[3] == k);
      if ((f.size() != 4 && f.size() != 5) || !known)
        STRATA_THROW(invalid_argument, "strata.fault", "STRATA_FAULT='", all,
                     "': expected rank;step;point;kind[;run] with kind one of "
                     "sigkill, sigterm, sigstop, exit0, exit1, abort, throw, skip, stall, nan, shape, "
                     "dtype, op; got '", one, "'");
      out.push_back({f[0], f[1], f[2], f[3], f.size() == 5 ? f[4] : "0"});
      at = end + 1;
    }
    return out;
  }();
  return faults;
}

/// Does what STRATA_FAULT asks at this point, if it asks anything here. A kind in `handled`
/// is returned for the caller to act on; "" when nothing is asked here.
inline std::string fault_point(int rank, std::int64_t step, std::string_view point,
                               std::initializer_list<std::string_view> handled = {}) {
  static const std::string run = [] {
    const char* every = std::getenv("STRATA_FAULT_EVERY_RUN");
    if (every != nullptr && std::string_view(every) == "1") return std::string("*");
    const char* r = std::getenv("STRATA_RESTART_COUNT");
    return std::string(r != nullptr && *r ? r : "0");
  }();
  for (const Fault& f : requested_faults()) {
    if ((f.rank != "*" && f.rank != std::to_string(rank)) || (f.step != "*" && f.step != std::to_string(step)) ||
        f.point != point || (run != "*" && f.run != run))
      continue;
    std::fprintf(stderr, "[strata.fault] rank %d step %lld at %.*s: %s\n", rank, static_cast<long long>(step),
                 static_cast<int>(point.size()), point.data(), f.kind.c_str());
    std::fflush(stderr);
    for (std::string_view h : handled)
      if (f.kind == h) return f.kind;
    if (f.kind == "sigkill") std::raise(SIGKILL);
    if (f.kind == "sigterm") std::raise(SIGTERM);
    if (f.kind == "sigstop") std::raise(SIGSTOP);
    if (f.kind == "exit0") std::_Exit(0);
    if (f.kind == "exit1") std::_Exit(1);
    if (f.kind == "abort") std::abort();
    // The tests match these messages whole: no file:line (STRATA_THROW's) after them.
    if (f.kind == "throw") throw error(detail::error_text("strata.fault", "injected at ", point, ", step ", step));
    throw invalid_argument(detail::error_text("strata.fault", "kind ", f.kind, " is not available at point ", point));
  }
  return {};
}

}  // namespace strata::testing

#if STRATA_FAULT_INJECTION
#define STRATA_FAULT_POINT(rank, step, point) ((void)::strata::testing::fault_point((rank), (step), (point)))
#else
#define STRATA_FAULT_POINT(rank, step, point) ((void)0)
#endif

/// \file
/// Which ranks of a ParameterServerStrategy job are servers and which are workers: by default
/// the first S ranks serve (S from the options, else STRATA_NUM_SERVERS, else 1);
/// STRATA_SERVER_RANKS="0,3" names them instead (TF_CONFIG's "ps" role). Bad values are an
/// error naming the variable and the value.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/support/error.hpp>
#include <strata/support/environment.hpp>

namespace strata::ps {

struct Roles {
  std::vector<int> servers;  ///< world ranks of the servers, ascending
  std::vector<int> workers;  ///< world ranks of the workers, ascending
  bool is_server(int rank) const { return std::find(servers.begin(), servers.end(), rank) != servers.end(); }
  /// Index of `rank` among the servers or among the workers.
  int index_of(int rank) const {
    const auto& v = is_server(rank) ? servers : workers;
    return static_cast<int>(std::find(v.begin(), v.end(), rank) - v.begin());
  }

  /// The roles of a job of `world` ranks; `requested` servers when positive, else from the
  /// environment.
  static Roles of(int world, int requested = 0) {
    Roles r;
    auto bad = [](const std::string& var, const std::string& value, const std::string& why) {
      return invalid_argument(strata::detail::error_text("strata.ps", var, "=", value, ": ", why));
    };
    if (const char* list = environment::get("STRATA_SERVER_RANKS")) {
      const std::string s = list;
      std::size_t at = 0;
      while (at <= s.size()) {
        const std::size_t comma = std::min(s.find(',', at), s.size());
        const std::string item = s.substr(at, comma - at);
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0') throw bad("STRATA_SERVER_RANKS", s, "'" + item + "' is not a rank");
        if (v < 0 || v >= world)
          throw bad("STRATA_SERVER_RANKS", s, "rank " + item + " is outside the job's 0.." + std::to_string(world - 1));
        if (r.is_server(static_cast<int>(v))) throw bad("STRATA_SERVER_RANKS", s, "rank " + item + " is listed twice");
        r.servers.push_back(static_cast<int>(v));
        at = comma + 1;
      }
      std::sort(r.servers.begin(), r.servers.end());
    } else {
      int n = requested;
      if (n <= 0) {
        n = 1;
        if (const char* e = environment::get("STRATA_NUM_SERVERS")) {
          char* end = nullptr;
          const long v = std::strtol(e, &end, 10);
          if (*end != '\0' || v < 1) throw bad("STRATA_NUM_SERVERS", e, "expected a positive number of servers");
          n = static_cast<int>(std::min<long>(v, world));
        }
      }
      for (int i = 0; i < std::min(n, world); ++i) r.servers.push_back(i);
    }
    for (int i = 0; i < world; ++i)
      if (!r.is_server(i)) r.workers.push_back(i);
    if (r.workers.empty())
      STRATA_THROW(invalid_argument, "strata.ps", "a job of ", world, " ranks with ", r.servers.size(),
                   " servers has no worker: start at least ", r.servers.size() + 1, " ranks, or fewer servers");
    return r;
  }
};

}  // namespace strata::ps

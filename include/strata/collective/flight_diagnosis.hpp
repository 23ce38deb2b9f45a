/// \file
/// The ranks' flight-recorder files (collective/flight_recorder.hpp) read back and merged into
/// what happened, in a sentence a user can act on: which rank never entered the collective
/// the others wait in, or which ranks called a different one at the same sequence number.
/// `strata-info --diagnose DIR` prints it; tests read the files through it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <strata/support/error.hpp>
#include <strata/tensor/dtype.hpp>  // name_of, size_of

namespace strata::collective {

/// One collective as a rank recorded it.
struct FlightRecord {
  int group = 0;
  std::uint64_t seq = 0;
  std::string op, reduce, dtype;
  std::uint64_t count = 0;
  int root = 0;
  std::string label, state;  ///< label "-" for none; state started, completed or failed
  std::int64_t start_ns = 0, end_ns = 0;
  bool same_call(const FlightRecord& o) const {
    return op == o.op && dtype == o.dtype && count == o.count && root == o.root && (op != "allreduce" || reduce == o.reduce);
  }
};

/// One rank's file.
struct FlightDump {
  struct Group {
    std::string kind;
    int rank = 0, size = 0;
  };
  std::string file;
  int rank = 0, size = 0;
  long pid = 0;
  std::string host, reason;
  std::int64_t now_ns = 0, wall_ns = 0;
  std::vector<Group> groups;
  std::vector<FlightRecord> entries;  ///< oldest first
};

/// Reads one rank's file; an error naming the file and line where it is not one.
inline FlightDump read_flight_dump(const std::string& file) {
  std::ifstream in(file);
  if (!in) STRATA_THROW(invalid_argument, "strata.flight", "cannot read ", file);
  FlightDump d;
  d.file = file;
  std::string line;
  int n = 0;
  auto bad = [&](const char* what) {
    STRATA_THROW(invalid_argument, "strata.flight", file, ":", n, ": ", what, ": '", line, "'");
  };
  if (!std::getline(in, line) || line.rfind("strata-flight-recorder ", 0) != 0) {
    n = 1;
    bad("not a strata flight-recorder file");
  }
  ++n;
  bool in_entries = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (in_entries) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string x; std::getline(ss, x, '\t');) f.push_back(x);
      if (f.size() != 12 || f[0] != "entry") bad("an entry has 12 tab-separated fields");
      try {
        FlightRecord r;
        r.group = std::stoi(f[1]);
        r.seq = std::stoull(f[2]);
        r.op = f[3];
        r.reduce = f[4];
        r.dtype = f[5];
        r.count = std::stoull(f[6]);
        r.root = std::stoi(f[7]);
        r.label = f[8];
        r.state = f[9];
        r.start_ns = std::stoll(f[10]);
        r.end_ns = std::stoll(f[11]);
        d.entries.push_back(std::move(r));
      } catch (const std::exception&) {
        bad("a number that does not read");
      }
      continue;
    }
    const auto sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    try {
      if (key == "rank") d.rank = std::stoi(value);
      else if (key == "size") d.size = std::stoi(value);
      else if (key == "pid") d.pid = std::stol(value);
      else if (key == "host") d.host = value;
      else if (key == "reason") d.reason = value;
      else if (key == "now_ns") d.now_ns = std::stoll(value);
      else if (key == "wall_ns") d.wall_ns = std::stoll(value);
      else if (key == "group") {
        std::istringstream gs(value);
        int id = -1;
        FlightDump::Group g;
        if (!(gs >> id >> g.kind >> g.rank >> g.size) || id != static_cast<int>(d.groups.size())) bad("a group line");
        d.groups.push_back(g);
      } else if (key.rfind("entries", 0) == 0)
        in_entries = true;
    } catch (const std::exception&) {
      bad("a number that does not read");
    }
  }
  return d;
}

/// Every rank's file in `dir` (rank<R>.flight), by rank; an error naming `dir` if there is none.
inline std::vector<FlightDump> read_flight_dumps(const std::string& dir) {
  std::vector<FlightDump> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0 && e.path().extension() == ".flight") out.push_back(read_flight_dump(e.path().string()));
  }
  if (ec) STRATA_THROW(invalid_argument, "strata.flight", "cannot list ", dir, ": ", ec.message());
  if (out.empty())
    STRATA_THROW(invalid_argument, "strata.flight", "no flight-recorder files (rank<R>.flight) in ", dir);
  std::sort(out.begin(), out.end(), [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  return out;
}

namespace detail {

/// "rank 3", "ranks 0-2", "ranks 0, 2 and 5".
inline std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j >= i + 2) {  // three or more in a row
      parts.push_back(std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
      i = j + 1;
    } else {
      parts.push_back(std::to_string(ranks[i]));
      ++i;
    }
  }
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t k = 0; k < parts.size(); ++k) s += (k == 0 ? "" : k + 1 == parts.size() ? " and " : ", ") + parts[k];
  return s;
}

inline std::string bytes_text(std::uint64_t count, const std::string& dtype) {
  std::size_t size = 1;  // the element size of the dtype the file names (name_of), 1 if unknown
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (dtype == name_of(t)) size = size_of(t);
  const double b = static_cast<double>(count) * static_cast<double>(size);
  std::ostringstream os;
  os.precision(1);
  os << std::fixed;
  if (b >= 1 << 20) os << b / (1 << 20) << " MiB";
  else if (b >= 1 << 10) os << b / (1 << 10) << " KiB";
  else os << static_cast<std::uint64_t>(b) << " B";
  return os.str();
}

inline std::string call_text(const FlightRecord& r) {
  std::ostringstream os;
  os << r.op << " #" << r.seq << " (";
  if (r.label != "-") os << r.label << ", ";
  if (r.op == "broadcast") os << "root " << r.root << ", ";
  os << r.dtype << " x " << r.count << ", " << bytes_text(r.count, r.dtype) << ")";
  return os.str();
}

inline std::string seconds_text(std::int64_t ns) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(ns) / 1e9 << " s";
  return os.str();
}

}  // namespace detail

/// What the ranks' files say, one sentence per communicator group that has a collective not
/// completed on some rank (or one saying none has), then a line per rank: its file's reason.
inline std::string diagnose(const std::vector<FlightDump>& dumps) {
  std::ostringstream out;
  std::size_t groups = 0;
  for (const FlightDump& d : dumps) groups = std::max(groups, d.groups.size());
  bool any = false;
  for (std::size_t g = 0; g < groups; ++g) {
    // This group's ranks: each file's rank in it, and its entries there.
    std::map<int, const FlightDump*> by_rank;
    int size = 0;
    std::string kind;
    for (const FlightDump& d : dumps)
      if (g < d.groups.size()) {
        by_rank[d.groups[g].rank] = &d;
        size = std::max(size, d.groups[g].size);
        kind = d.groups[g].kind;
      }
    auto entries_of = [&](const FlightDump& d) {
      std::vector<const FlightRecord*> v;
      for (const FlightRecord& r : d.entries)
        if (r.group == static_cast<int>(g)) v.push_back(&r);
      return v;
    };
    // The first sequence number some rank did not complete.
    std::uint64_t stuck = UINT64_MAX;
    for (const auto& [rank, d] : by_rank)
      for (const FlightRecord* r : entries_of(*d))
        if (r->state != "completed") stuck = std::min(stuck, r->seq);
    const std::string name = groups > 1 ? "group " + std::to_string(g) + " (" + kind + "): " : "";
    if (stuck == UINT64_MAX) {
      std::uint64_t last = 0;
      for (const auto& [rank, d] : by_rank)
        for (const FlightRecord* r : entries_of(*d)) last = std::max(last, r->seq);
      out << name << "no collective was in progress on any rank; the last recorded is #" << last << "\n";
      continue;
    }
    any = true;
    std::vector<int> never, missing, inside, done;
    std::map<int, const FlightRecord*> at;
    std::int64_t waited = INT64_MAX;
    for (int r = 0; r < size; ++r) {
      const auto it = by_rank.find(r);
      if (it == by_rank.end()) {
        missing.push_back(r);
        continue;
      }
      const FlightRecord* mine = nullptr;
      for (const FlightRecord* e : entries_of(*it->second))
        if (e->seq == stuck) mine = e;
      if (mine == nullptr) {
        never.push_back(r);
        continue;
      }
      at[r] = mine;
      if (mine->state == "completed") {
        done.push_back(r);
        continue;
      }
      inside.push_back(r);
      const std::int64_t until = mine->end_ns != 0 ? mine->end_ns : it->second->now_ns;
      waited = std::min(waited, until - mine->start_ns);
    }
    // The call the most ranks made at that number, and any rank whose call differs.
    const FlightRecord* common = nullptr;
    std::size_t best = 0;
    for (const auto& [r, e] : at) {
      std::size_t same = 0;
      for (const auto& [r2, e2] : at) same += e->same_call(*e2);
      if (same > best) best = same, common = e;
    }
    std::vector<int> differ;
    for (const auto& [r, e] : at)
      if (!e->same_call(*common)) differ.push_back(r);
    out << name;
    if (!differ.empty()) {
      out << "at #" << stuck << " ";
      for (std::size_t k = 0; k < differ.size(); ++k)
        out << (k ? "; " : "") << detail::rank_list({differ[k]}) << " called " << detail::call_text(*at[differ[k]]);
      std::vector<int> others;
      for (const auto& [r, e] : at)
        if (e->same_call(*common)) others.push_back(r);
      out << ", " << (others.size() == 1 ? "" : "the others, ") << detail::rank_list(others) << ", "
          << detail::call_text(*common) << "\n";
    } else if (!never.empty()) {
      out << detail::rank_list(never) << " never entered " << detail::call_text(*common) << "; "
          << detail::rank_list(inside) << (inside.size() == 1 ? " has" : " have") << " waited "
          << detail::seconds_text(waited) << " in it";
      if (!done.empty()) out << " (" << detail::rank_list(done) << " completed it)";
      out << "\n";
    } else if (!inside.empty()) {
      out << detail::rank_list(inside) << (inside.size() == 1 ? " is" : " are") << " in "
          << detail::call_text(*common) << ", entered by every rank that left a file; waited "
          << detail::seconds_text(waited) << " (the transport, or a rank that left no file)\n";
    }
    if (!missing.empty())
      out << name << detail::rank_list(missing) << " left no file (gone before it could write one, or on another "
          << "host: copy its directory here)\n";
  }
  if (!any && groups == 0) out << "no communicator was recorded\n";
  for (const FlightDump& d : dumps) {
    std::string reason = d.reason;
    while (!reason.empty() && (reason.back() == ' ' || reason.back() == ';')) reason.pop_back();
    out << "rank " << d.rank << " (" << d.host << ", pid " << d.pid << "): " << reason;
    if (!d.entries.empty()) {
      const FlightRecord& last = d.entries.back();
      out << "; last: " << last.op << " #" << last.seq << " " << last.state;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace strata::collective

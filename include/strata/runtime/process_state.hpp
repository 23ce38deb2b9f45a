/// \file
/// Whether another process on this host is running, stopped or gone, from /proc: how a
/// collective that lost or waits on a local peer names it.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

namespace strata::runtime {

/// The scheduler state of process `pid` on this host: 'R', 'S', 'D', 'T' (stopped), 't'
/// (traced), 'Z' (zombie), ... or 'X' when it no longer exists.
inline char process_state(long pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 'X';
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');  // "pid (comm) S ..."; comm may hold spaces
  return n == 0 || !close || close[1] != ' ' ? '?' : close[2];
}

/// True for a stopped or traced process (it cannot arrive at a collective).
inline bool is_stopped(char state) noexcept { return state == 'T' || state == 't'; }
/// True for a process that has exited (gone, or a zombie not yet reaped).
inline bool is_gone(char state) noexcept { return state == 'X' || state == 'Z'; }

}  // namespace strata::runtime

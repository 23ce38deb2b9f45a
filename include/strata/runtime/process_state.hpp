/// \file
/// Whether another process on this host is running, stopped or gone, from /proc: how a
/// collective that lost or waits on a local peer names it.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace strata::runtime {

/// The scheduler state of process `pid` on this host: 'R', 'S', 'D', 'T' (stopped), 't'
/// (traced), 'Z' (zombie), ... or 'X' when it no longer exists.
inline char process_state(long pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 'X';
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  if (n == 0) return 'X';  // reaped between the open and the read: the read fails with ESRCH
  const char* close = std::strrchr(buf, ')');  // "pid (comm) S ..."; comm may hold spaces
  return !close || close[1] != ' ' ? '?' : close[2];
}

/// True for a stopped or traced process (it cannot arrive at a collective).
inline bool is_stopped(char state) noexcept { return state == 'T' || state == 't'; }
/// True for a process that has exited (gone, or a zombie not yet reaped).
inline bool is_gone(char state) noexcept { return state == 'X' || state == 'Z'; }

/// A peer's state once it settles: `state()` polled every 10 ms, up to `tries` times, until the
/// peer is stopped, gone or not on this host ('?') — a dead peer's connection closes a moment
/// before its process is gone.
template <class F>
char settled_state(F&& state, int tries = 20) {
  char st = state();
  for (int i = 0; i < tries && st != '?' && !is_gone(st) && !is_stopped(st); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = state();
  }
  return st;
}

/// How an error message describes a peer in state `st`.
inline const char* describe_state(char st) noexcept {
  return is_stopped(st) ? " (stopped)" : is_gone(st) ? " (gone)" : " (running or elsewhere)";
}

}  // namespace strata::runtime

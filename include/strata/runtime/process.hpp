/// \file
/// Who this process is: rank, world size, local rank and local size, and where the
/// rendezvous is — from mpirun (OMPI_COMM_WORLD_*), from strata-run or any launcher that
/// sets STRATA_* variables, or a single process. Bad values are an immediate error that names
/// the variable and its value.
///
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | STRATA_RANK, STRATA_WORLD_SIZE | this process, and how many | (both or neither) |
/// | STRATA_LOCAL_RANK, STRATA_LOCAL_SIZE | among the processes of this host | rank, world size |
/// | STRATA_MASTER_ADDR, STRATA_MASTER_PORT | the rendezvous (TCP store) | 127.0.0.1, 29500 |
/// | STRATA_RENDEZVOUS_DIR | a directory for a file-store rendezvous | none |
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>

#include <strata/support/check.hpp>
#include <strata/support/environment.hpp>

namespace strata::runtime {

/// This process's place in the job.
struct ProcessInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_size = 1;
  std::string launcher = "single";  ///< "mpirun", "env" (STRATA_*), or "single"
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rendezvous_dir;
  bool is_chief() const noexcept { return rank == 0; }
};

namespace detail {

/// The environment variable's value, or nullptr when unset or empty: one of strata's
/// (support/environment.hpp's table), or a launcher's own (mpirun's OMPI_COMM_WORLD_RANK).
inline const char* env(const char* name) {
  return std::string_view(name).starts_with("STRATA_") ? environment::get(name) : environment::launcher_variable(name);
}

/// Parses an integer in [lo, hi] from variable `name`; throws naming the variable and value.
inline long env_int(const char* name, const char* value, long lo, long hi) {
  return environment::to_int(name, value, lo, hi);
}

/// Variable `name` naming one of two ways: false when unset or `first`, true when `second`;
/// anything else throws (in `domain`) naming the variable and value.
inline bool env_either(const char* name, const char* first, const char* second, const char* domain) {
  return environment::either(name, first, second, domain);
}

}  // namespace detail

/// Reads the process's place from the environment (see the table above).
inline ProcessInfo detect_process() {
  using detail::env;
  using detail::env_int;
  constexpr long kMaxRanks = 1 << 24;
  ProcessInfo p;
  if (const char* r = env("OMPI_COMM_WORLD_RANK")) {
    p.launcher = "mpirun";
    const char* s = env("OMPI_COMM_WORLD_SIZE");
    STRATA_CHECK(s != nullptr, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    p.world_size = static_cast<int>(env_int("OMPI_COMM_WORLD_SIZE", s, 1, kMaxRanks));
    p.rank = static_cast<int>(env_int("OMPI_COMM_WORLD_RANK", r, 0, p.world_size - 1));
    const char* lr = env("OMPI_COMM_WORLD_LOCAL_RANK");
    const char* ls = env("OMPI_COMM_WORLD_LOCAL_SIZE");
    p.local_size = ls ? static_cast<int>(env_int("OMPI_COMM_WORLD_LOCAL_SIZE", ls, 1, p.world_size)) : p.world_size;
    p.local_rank = lr ? static_cast<int>(env_int("OMPI_COMM_WORLD_LOCAL_RANK", lr, 0, p.local_size - 1)) : p.rank;
  } else if (env("STRATA_RANK") || env("STRATA_WORLD_SIZE")) {
    p.launcher = "env";
    const char* r = env("STRATA_RANK");
    const char* s = env("STRATA_WORLD_SIZE");
    STRATA_CHECK(r != nullptr, "STRATA_WORLD_SIZE is set but STRATA_RANK is not (set both, or run under strata-run)");
    STRATA_CHECK(s != nullptr, "STRATA_RANK is set but STRATA_WORLD_SIZE is not (set both, or run under strata-run)");
    p.world_size = static_cast<int>(env_int("STRATA_WORLD_SIZE", s, 1, kMaxRanks));
    const long rank = env_int("STRATA_RANK", r, 0, kMaxRanks);
    if (rank >= p.world_size)
      STRATA_THROW(::strata::invalid_argument, "strata.runtime", "STRATA_RANK=", r, " is not below STRATA_WORLD_SIZE=", s);
    p.rank = static_cast<int>(rank);
    const char* ls = env("STRATA_LOCAL_SIZE");
    const char* lr = env("STRATA_LOCAL_RANK");
    p.local_size = ls ? static_cast<int>(env_int("STRATA_LOCAL_SIZE", ls, 1, p.world_size)) : p.world_size;
    p.local_rank = lr ? static_cast<int>(env_int("STRATA_LOCAL_RANK", lr, 0, p.local_size - 1)) : p.rank % p.local_size;
  }
  if (const char* a = env("STRATA_MASTER_ADDR")) p.master_addr = a;
  if (const char* port = env("STRATA_MASTER_PORT"))
    p.master_port = static_cast<int>(env_int("STRATA_MASTER_PORT", port, 1, 65535));
  if (const char* d = env("STRATA_RENDEZVOUS_DIR")) p.rendezvous_dir = d;
  return p;
}

}  // namespace strata::runtime

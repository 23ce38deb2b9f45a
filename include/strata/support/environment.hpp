/// \file
/// Every environment variable strata reads, in one table, and the one place that reads them.
/// A variable sets the default of an option a program can also set in code (the table names
/// the field), or says where the process is in its job (what `strata-run` and the launchers
/// export). Reading a name the table does not list is an error, so the table, and the one in
/// docs/environment.md that tools/check_docs.sh holds to it, list everything the library
/// reads. The variables are read when the object they configure is made (an engine, a
/// collective, a kernel's first call), not cached: a program may set one before it.
///
/// Part of the base layer (the standard library and support/error.hpp only), so the kernels
/// read their variables here too.
#pragma once

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include <strata/support/error.hpp>

namespace strata::environment {

/// One variable: its name, what it does, its default, and what sets the same in code.
struct Variable {
  std::string_view name, meaning, default_value, in_code;
};

// clang-format off
inline constexpr std::array kVariables{
  // Where the process is in its job (strata-run and the launchers export these).
  Variable{"STRATA_RANK", "this process's rank in the job", "0 (or mpirun's OMPI_COMM_WORLD_RANK)", "none"},
  Variable{"STRATA_WORLD_SIZE", "the job's processes", "1 (or mpirun's)", "none"},
  Variable{"STRATA_LOCAL_RANK", "this process's rank among those of its host", "rank modulo STRATA_LOCAL_SIZE", "none"},
  Variable{"STRATA_LOCAL_SIZE", "the job's processes on this host", "STRATA_WORLD_SIZE", "none"},
  Variable{"STRATA_MASTER_ADDR", "the address of rank 0's TCP store", "127.0.0.1", "none"},
  Variable{"STRATA_MASTER_PORT", "the port of rank 0's TCP store", "29500", "none"},
  Variable{"STRATA_RENDEZVOUS_DIR", "a shared directory for Gloo's file rendezvous instead of the TCP store", "none (the TCP store)", "none"},
  Variable{"STRATA_JOB_TOKEN", "the secret every process of the job proves it holds to the store (hex)", "drawn afresh by strata-run for each run", "none"},
  Variable{"STRATA_RESTART_COUNT", "how many times strata-run --max-restarts has restarted the job", "0", "none"},
  Variable{"STRATA_ELASTIC", "MIN:MAX: the process belongs to an elastic job (strata-run --elastic)", "unset: not elastic", "none"},
  Variable{"STRATA_IFNAME", "the network interface Gloo's connections use", "the address the store is reached at", "none"},
  Variable{"STRATA_SERVER_RANKS", "a parameter-server job's server ranks, comma-separated", "the first STRATA_NUM_SERVERS ranks", "ParameterServerOptions::servers"},
  Variable{"STRATA_NUM_SERVERS", "a parameter-server job's server count", "1", "ParameterServerOptions::servers"},
  Variable{"STRATA_PS_JOIN", "1: this worker joins a running parameter-server job", "0", "none"},
  // Collectives.
  Variable{"STRATA_COLLECTIVE_TIMEOUT", "seconds a collective waits for every rank before it fails naming the missing ones", "300", "collective::Options::timeout"},
  Variable{"STRATA_COLLECTIVE_DEBUG", "1: compare every collective's fingerprint across the ranks before it runs", "0", "collective::Options::check_fingerprints"},
  Variable{"STRATA_FLIGHT_RECORDER_DIR", "where each rank writes its flight-recorder file (rank<R>.flight)", "<temp>/strata-flight-<launcher pid>", "collective::FlightRecorder::set_directory"},
  Variable{"STRATA_FLIGHT_RECORDER_ENTRIES", "collectives the flight recorder keeps (0: off)", "4096", "none"},
  Variable{"STRATA_SHM", "0: never reduce through the host's shared memory", "1", "none"},
  Variable{"STRATA_SPIN_US", "microseconds a waiter spins before it sleeps (0 .. 1,000,000)", "2000 with a core per rank, else a brief spin", "none"},
  // The gradient path.
  Variable{"STRATA_BUCKET_BYTES", "the gradient engine's bucket size (1 .. 4 GiB)", "1048576", "MirroredOptions::bucket_bytes, MultiWorkerOptions::bucket_bytes"},
  Variable{"STRATA_COMM_THREAD", "1: shared-memory buckets reduced on the communication thread; 0: on the replica's", "by the host's cores", "none"},
  Variable{"STRATA_GRADIENTS", "whole or sharded: where Mirrored's summed gradients are held", "whole", "MirroredOptions::gradients"},
  Variable{"STRATA_ROW_AGGREGATION", "auto, gather or dense: how row-sparse tables are summed", "auto", "none"},
  Variable{"STRATA_ROW_SPLIT", "even or measured: how Mirrored divides a batch's rows", "even", "MirroredOptions::rows"},
  Variable{"STRATA_SPLIT_UPDATE", "0, 1 or auto: whether the optimizer update is split across replicas", "auto", "MirroredOptions::split_update, MultiWorkerOptions::split_update"},
  // Kernels.
  Variable{"STRATA_GEMM", "auto, strata or blas: the float GEMM kernel", "auto", "none"},
  Variable{"STRATA_CONV", "auto or im2col: whether 3x3 convolutions go by Winograd's F(2x2, 3x3)", "auto", "none"},
  Variable{"STRATA_BLAS_CORE", "auto or keep: whether a pre-AVX OpenBLAS kernel choice is corrected", "auto", "none"},
  // Data.
  Variable{"STRATA_FASHION_MNIST_DIR", "where the Fashion-MNIST IDX files are", "/usr/share/datasets/fashion-mnist", "data::fashion_mnist_train(dir), data::fashion_mnist_test(dir)"},
  Variable{"STRATA_FORTUNES_DIR", "where the fortunes text is", "/usr/share/games/fortunes", "data::fortunes_text(dir)"},
};
// clang-format on

/// The listed variable `name`, or null.
constexpr const Variable* find(std::string_view name) noexcept {
  for (const Variable& v : kVariables)
    if (v.name == name) return &v;
  return nullptr;
}

/// The value of variable `name` (null-terminated, one the table lists), or null when it is
/// unset or empty.
inline const char* get(const char* name) {
  if (find(name) == nullptr)
    STRATA_THROW(invalid_argument, "strata.environment", "'", name, "' is not in strata's table of environment "
                 "variables (include/strata/support/environment.hpp)");
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// A launcher's own variable (mpirun's OMPI_COMM_WORLD_RANK and the like): read where the
/// process learns its place, not listed since strata does not define them.
inline const char* launcher_variable(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// `value` of variable `name` as an integer in [lo, hi]; an error naming both otherwise.
inline long to_int(const char* name, const char* value, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno == ERANGE)
    STRATA_THROW(invalid_argument, "strata.runtime", name, "='", value, "' is not an integer");
  if (x < lo || x > hi) STRATA_THROW(invalid_argument, "strata.runtime", name, "=", value, " is outside ", lo, "..", hi);
  return x;
}

/// Variable `name` naming one of two ways: false when unset or `first`, true when `second`;
/// anything else is an error (in `domain`) naming the variable and its value.
inline bool either(const char* name, std::string_view first, std::string_view second, const char* domain) {
  const char* v = get(name);
  if (v == nullptr || first == v) return false;
  if (second == v) return true;
  STRATA_THROW(invalid_argument, domain, name, "='", v, "' is neither ", first, " nor ", second);
}

}  // namespace strata::environment

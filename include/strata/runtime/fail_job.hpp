/// \file
/// fail_job: what a program's top-level error handler calls when this process fails, so the
/// rest of the job stops now rather than at their collectives' deadlines. Under mpirun a
/// process that returns from main with an error still waits in MPI_Finalize for the others,
/// while they wait in a collective for it; collective::Mpi installs MPI_Abort here. Over Gloo
/// nothing is needed (the exit closes the connections, and the peers fail at once), so
/// without MPI it does nothing.
#pragma once

#include <atomic>
#include <string>

namespace strata::runtime {

using JobAbort = void (*)(const std::string& reason);

/// The process-wide hook: set once by a policy that needs it (collective::Mpi::initialize).
inline std::atomic<JobAbort>& job_abort_hook() {
  static std::atomic<JobAbort> hook{nullptr};
  return hook;
}

/// Ends the whole job because this process failed with `reason` (printed first where the
/// hook ends the job); returns when nothing needs to be done.
inline void fail_job(const std::string& reason) {
  if (const JobAbort abort = job_abort_hook().load(std::memory_order_acquire)) abort(reason);
}

}  // namespace strata::runtime

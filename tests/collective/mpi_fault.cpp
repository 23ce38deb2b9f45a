// A job whose rank 1 misbehaves, for tests/collective/run_mpi_fault.sh:
//   mpi_fault skip   rank 1 never calls the second allreduce: the others' deadline aborts the job
//   mpi_fault kill   rank 1 SIGKILLs itself: mpirun aborts the job
//   mpi_fault stop   rank 1 SIGSTOPs itself: the others' deadline aborts the job, naming it
#include <csignal>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/mpi.hpp>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "skip";
  strata::collective::Options o;
  o.timeout = std::chrono::milliseconds(2000);
  strata::collective::Mpi c(MPI_COMM_WORLD, o);
  std::vector<float> x(1000, 1.0f);
  c.allreduce(std::span(x), strata::ReduceOp::Sum);
  if (c.rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "stop") std::raise(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(30));  // stalls: never reaches the next call
    return 0;
  }
  c.allreduce(std::span(x), strata::ReduceOp::Sum);
  std::printf("rank %d finished: the fault went unnoticed\n", c.rank());
  return 0;
}

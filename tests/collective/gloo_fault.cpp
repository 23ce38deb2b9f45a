// A job whose rank 1 misbehaves, for tests/collective/run_gloo_fault.sh (under strata-run):
//   gloo_fault skip   rank 1 never calls the second allreduce: the others time out, naming it
//   gloo_fault kill   rank 1 SIGKILLs itself: the others fail at once from the closed socket
//   gloo_fault stop   rank 1 SIGSTOPs itself: the others time out (not sooner), naming it
#include <chrono>
#include <csignal>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/gloo.hpp>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "skip";
  strata::collective::Options o;
  o.timeout = std::chrono::milliseconds(2000);
  strata::collective::Gloo c("world", o);
  std::vector<float> x(1000, 1.0f);
  c.allreduce(std::span(x), strata::ReduceOp::Sum);
  if (c.rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "stop") std::raise(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  try {
    c.allreduce(std::span(x), strata::ReduceOp::Sum);
  } catch (const strata::error& e) {
    std::printf("rank %d: %s\n", c.rank(), e.what());
    return 1;
  }
  std::printf("rank %d finished: the fault went unnoticed\n", c.rank());
  return 0;
}

// A rank for tests/runtime/run_launcher.sh: prints what it detected, then
//   rank_probe ok          exits 0
//   rank_probe fail R      rank R exits 3 at once, the others sleep 60 s (strata-run must stop them)
//   rank_probe outlive R   rank R exits 3 at once, the others finish after 1 s (strata-run --keep-going)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <strata/runtime/process.hpp>

int main(int argc, char** argv) {
  const auto p = strata::runtime::detect_process();
  std::printf("rank %d of %d, local %d of %d, launcher %s, master %s:%d, dir %s\n", p.rank, p.world_size, p.local_rank,
              p.local_size, p.launcher.c_str(), p.master_addr.c_str(), p.master_port,
              p.rendezvous_dir.empty() ? "-" : "set");
  std::fflush(stdout);
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode == "fail") {
    if (p.rank == std::atoi(argv[2])) return 3;
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  if (mode == "outlive") {
    if (p.rank == std::atoi(argv[2])) return 3;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("rank %d finished\n", p.rank);
  }
  return 0;
}

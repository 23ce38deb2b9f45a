// strata-run: starts N local processes of a program with the STRATA_* environment
// (include/strata/runtime/launcher.hpp), for launches without mpirun (Gloo, tests).
#include <cstdio>
#include <exception>

#include <strata/runtime/launcher.hpp>

int main(int argc, char** argv) {
  try {
    return strata::runtime::launch_processes(strata::runtime::parse_launch_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

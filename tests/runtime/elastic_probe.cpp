// A member of an elastic job's membership, for run_elastic_membership.sh (under strata-run
// --elastic): joins with its id ("host:pid"), prints its view, and waits for the next one.
// The process started as rank VICTIM (argv[1]; -1: none) SIGKILLs itself after the first view.
//   elastic_probe VICTIM
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <strata/runtime/process.hpp>
#include <strata/runtime/tcp_store.hpp>

int main(int argc, char** argv) {
  const int victim = argc > 1 ? std::atoi(argv[1]) : -1;
  const strata::runtime::ProcessInfo p = strata::runtime::detect_process();
  auto& store = strata::runtime::TcpStore::instance(p.master_addr, p.master_port, p.rank, std::chrono::seconds(30));
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::string id = std::string(host) + ":" + std::to_string(::getpid());
  auto show = [&](const char* what, const strata::runtime::View& v) {
    if (v.state != strata::runtime::View::State::member) {
      std::printf("%s: %s\n", what, v.reason().c_str());
      return false;
    }
    std::printf("%s: generation %llu, rank %d of %d\n", what, static_cast<unsigned long long>(v.generation), v.rank_of(id),
                v.size());
    std::fflush(stdout);
    return true;
  };
  const strata::runtime::View first = store.join(id, std::chrono::seconds(30));
  if (!show("joined", first)) return 1;
  if (p.rank == victim) std::raise(SIGKILL);
  const strata::runtime::View next = store.wait_view(id, first.generation, std::chrono::seconds(30));
  return show("next", next) ? 0 : 1;
}

// A rebuild interrupted by a loss, for run_elastic_rebuild.sh (under strata-run --elastic, the
// collective timeout long): every generation builds a Gloo communicator under its prefix, with
// the rendezvous given up once a newer view is out (collective::Options::rendezvous_abandoned),
// and all-reduces once. The process started as rank FIRST SIGKILLs itself after generation
// 1's all-reduce; the one started as SECOND ends as generation 2 begins, before its
// rendezvous, so the others wait in a rendezvous that cannot complete. Each survivor logs:
//   generation G of N: all-reduce <sum> at <unix ms>
//   second victim gone at <unix ms>          (SECOND, just before it ends)
//   elastic_rebuild_probe FIRST SECOND
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/strategy/elastic/member.hpp>

using namespace strata;

namespace {
long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: elastic_rebuild_probe FIRST SECOND\n");
    return 2;
  }
  const int first = std::atoi(argv[1]), second = std::atoi(argv[2]);
  const int started_as = runtime::detect_process().rank;
  try {
    elastic::Member member;
    for (;;) {
      if (member.generation() == 2 && started_as == second) {
        std::printf("second victim gone at %lld\n", unix_ms());
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      try {
        collective::Options o = collective::Options::from_env();
        o.rendezvous_abandoned = [&] { return member.superseded(); };
        collective::Gloo comm(member.process(), member.prefix(), o);
        std::vector<double> one{1.0};
        comm.allreduce(std::span(one), ReduceOp::Sum);
        std::printf("generation %llu of %d: all-reduce %g at %lld\n", static_cast<unsigned long long>(member.generation()),
                    member.size(), one[0], unix_ms());
        std::fflush(stdout);
        if (member.generation() == 1 && started_as == first) std::raise(SIGKILL);
        if (member.generation() >= 3) return 0;
        comm.barrier();  // fails once FIRST is gone
        std::fprintf(stderr, "elastic_rebuild_probe: generation %llu went on without a loss\n",
                     static_cast<unsigned long long>(member.generation()));
        return 1;
      } catch (const collective_error& e) {
        std::printf("generation %llu ended: %s\n", static_cast<unsigned long long>(member.generation()), e.what());
        std::fflush(stdout);
        if (!member.census()) throw;
      }
      member.next();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_rebuild_probe: %s\n", e.what());
    return 1;
  }
}

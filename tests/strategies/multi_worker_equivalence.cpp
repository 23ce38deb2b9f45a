// MultiWorkerMirroredStrategy<C> across processes ends where OneDeviceStrategy ends on the
// same global batch (each process computes that reference itself); with gradient
// accumulation (k = 2) too, and for a CNN. Run under mpirun (C = Mpi) or strata-run (Gloo).
//   multi_worker_equivalence mpi|gloo        exit status 0: every check held on this rank
#include <cstdio>
#include <string>

#include "strategies/equivalence.hpp"

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

namespace {

template <class C>
int check_all() {
  int failures = 0;
  strata::MultiWorkerMirroredStrategy<C> strategy({.bucket_bytes = 2048});
  const int rank = strategy.rank(), n = strategy.num_replicas_in_sync();
  for (bool conv : {false, true})
    for (int k : {1, 2}) {
      equivalence::Setup s;
      s.conv = conv;
      s.accumulation = k;
      equivalence::Setup plain = s;
      plain.accumulation = 1;
      strata::OneDeviceStrategy one;
      std::vector<double> ref_losses, losses;
      const auto ref = equivalence::train_steps(one, plain, &ref_losses);
      const auto got = equivalence::train_steps(strategy, s, &losses);
      const double diff = equivalence::max_relative_difference(got, ref);
      double loss_diff = losses.size() == ref_losses.size() ? 0.0 : 1.0;
      for (std::size_t i = 0; i < std::min(losses.size(), ref_losses.size()); ++i)
        loss_diff = std::max(loss_diff, std::fabs(losses[i] - ref_losses[i]) / std::fabs(ref_losses[i]));
      const bool ok = diff < 1e-5 && loss_diff < 1e-5;
      failures += ok ? 0 : 1;
      std::printf("%s rank %d of %d: %s k=%d  parameters differ by %.3g (relative), losses by %.3g over %zu steps\n",
                  ok ? "ok  " : "FAIL", rank, n, conv ? "cnn" : "mlp", k, diff, loss_diff, losses.size());
    }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  try {
#if STRATA_HAS_MPI
    if (which == "mpi") return check_all<strata::collective::Mpi>() == 0 ? 0 : 1;
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return check_all<strata::collective::Gloo>() == 0 ? 0 : 1;
#endif
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("usage: multi_worker_equivalence mpi|gloo (built with: %s%s)\n", STRATA_HAS_MPI ? "mpi " : "",
              STRATA_HAS_GLOO ? "gloo" : "");
  return 2;
}

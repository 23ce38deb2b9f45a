// NonFinite::error across processes (MultiWorkerMirrored over Mpi under mpirun, or Gloo under
// strata-run): rank 2's gradients get a NaN at step 2; the job must stop, the message naming
// the parameter and "first non-finite on replica 2". Checked by the meson test's regex.
//   nonfinite_error mpi|gloo
#include <cmath>
#include <cstdio>
#include <string>

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#include <strata/strata.hpp>

#include "strategies/equivalence.hpp"

template <class C>
int run() {
  strata::MultiWorkerMirroredStrategy<C> strategy;
  strata::manual_seed(5);
  auto net = strategy.scope([] { return equivalence::model(false); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.2); });
  opt.set_nonfinite(strata::optim::NonFinite::error);
  equivalence::Setup s;
  int step = 0;
  try {
    for (auto& batch : strategy.distribute(strata::data::Pipeline(equivalence::dataset(s)).batch(27))) {
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        auto loss = equivalence::replica_loss(net, b.x, b.y, b.global_size);
        if (step == 2 && ctx.replica_id_in_sync_group() == 2) loss = loss * std::nan("");
        opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
      }, batch);
      ++step;
    }
  } catch (const strata::data_error& e) {
    std::printf("rank %d stopped: %s\n", strategy.rank(), e.what());
    return 1;
  }
  std::printf("rank %d finished: the NaN went unnoticed\n", strategy.rank());
  return 0;
}

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
#if STRATA_HAS_MPI
  if (which == "mpi") return run<strata::collective::Mpi>();
#endif
#if STRATA_HAS_GLOO
  if (which == "gloo") return run<strata::collective::Gloo>();
#endif
  std::printf("usage: nonfinite_error mpi|gloo\n");
  return 2;
}

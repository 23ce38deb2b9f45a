// A program that uses an installed strata the way a user's project does: it trains a linear
// model on synthetic data under OneDeviceStrategy and, where the build links them, runs an
// all-reduce on a one-rank MPI and Gloo group. Exits non-zero unless the loss fell 10x.
#include <cstdio>
#include <span>
#include <vector>

#include <strata/strata.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

int main() {
  strata::OneDeviceStrategy strategy;
  strata::manual_seed(1);
  auto net = strategy.scope([] { return strata::nn::Sequential(strata::nn::Linear(4, 1)); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.1); });
  strata::Generator g(2);
  const strata::Tensor x = strata::uniform({256, 4}, -1, 1, g);
  const strata::Tensor w = strata::uniform({4, 1}, -1, 1, g);
  const strata::Tensor y = strata::matmul(x, w);
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step)
    strategy.run([&](strata::ReplicaContext& ctx) {
      auto d = net(x) - y;
      auto loss = strata::mean(d * d);
      auto grads = strata::grad(loss, net.parameters());
      opt.apply_gradients(ctx, grads);
      last = loss.item();
      if (step == 0) first = last;
    });
  std::printf("consumer: loss %.4f -> %.6f\n", first, last);
  int ok = last < first / 10;
#if STRATA_HAS_MPI
  {
    strata::collective::Mpi comm;
    std::vector<float> v{1.5f};
    comm.allreduce(std::span(v), strata::ReduceOp::Sum);
    std::printf("consumer: mpi allreduce over %d rank(s): %g\n", comm.size(), static_cast<double>(v[0]));
    ok = ok && v[0] == 1.5f * static_cast<float>(comm.size());
  }
#endif
#if STRATA_HAS_GLOO
  {
    strata::collective::Gloo comm("consumer");
    std::vector<float> v{2.5f};
    comm.allreduce(std::span(v), strata::ReduceOp::Sum);
    std::printf("consumer: gloo allreduce over %d rank(s): %g\n", comm.size(), static_cast<double>(v[0]));
    ok = ok && v[0] == 2.5f * static_cast<float>(comm.size());
  }
#endif
  return ok ? 0 : 1;
}

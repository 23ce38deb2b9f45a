// 13 — Workers that join a parameter-server job. Under ps::Async with dispatched batches the
// first server hands out each epoch's batches one at a time; with admit_workers, a process
// started later with STRATA_PS_JOIN=1 joins the running job: it links to every server, takes
// the job's epoch and current values (first_epoch()), and then takes batches from the same
// queue as the others. A worker that dies hands its batches back. Every rank runs this loop.
//
//   export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
//   build/tools/strata-run -np 3 --rendezvous tcp --port 29600 --keep-going build/examples/13_parameter_server_join
//   # while it trains, one more worker, from another shell (same STRATA_JOB_TOKEN):
//   STRATA_PS_JOIN=1 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=29600 build/examples/13_parameter_server_join
#include <cstdio>
#include <exception>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>  // not in the umbrella header

using namespace strata;

int main() {
  try {
    ParameterServerStrategy<collective::Gloo, ps::Async> strategy(
        {.servers = 1, .dispatch_batches = true, .admit_workers = true});
    auto model = strategy.scope([] {
      using namespace nn;
      return Sequential(Flatten(), Linear(784, 128), ReLU(), Linear(128, 10));
    });
    auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.05); });
    const auto input = data::Pipeline(data::fashion_mnist_train()).batch(64).take(200);

    for (auto epoch = strategy.first_epoch(); epoch < 2; ++epoch) {  // a joiner starts at the job's epoch
      int steps = 0;
      for (auto& batch : strategy.distribute(input)) {  // the next batch from the first server
        strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
          Tensor l = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
          opt.apply_gradients(ctx, grad(l, model.parameters()));  // applied on arrival
        }, batch);
        ++steps;
      }
      if (!strategy.is_server())
        std::printf("worker rank %d%s: epoch %lld, %d of the epoch's %lld batches\n", strategy.rank(),
                    strategy.joined() ? " (joined)" : "", static_cast<long long>(epoch), steps,
                    static_cast<long long>(input.num_batches()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "13_parameter_server_join: %s\n", e.what());
    return 1;
  }
}

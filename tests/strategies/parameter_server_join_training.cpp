// A worker joins a running ParameterServerStrategy<Gloo, Async> job (admit_workers, dispatched
// batches), for tests/strategies/run_parameter_server_join_training.sh. Every rank runs the same
// loop, from strategy.first_epoch(); each step sleeps 2 ms, so that an epoch of 750 batches lasts
// long enough for a joiner to come in the middle of it. Each worker prints the steps it took in
// each epoch and when its first step came; the first server prints what its dispatcher did; at
// the end every rank prints the CRC-32C of its parameters, which the servers' values set.
//   strata-run --rendezvous tcp --port P -np S+W parameter_server_join_training S EPOCHS
//   STRATA_PS_JOIN=1 STRATA_MASTER_PORT=P parameter_server_join_training S EPOCHS
// A joiner with KILL_AT_STEP=k SIGKILLs itself at its k-th step: the others train its batches
// (KILL_RANK=r: worker rank r of the job's first ones instead). MIN_WORKERS and MAX_WORKERS set
// the options of the same names.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <strata/checkpoint/crc32c.hpp>
#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  if (argc < 3) {
    std::fprintf(stderr, "usage: parameter_server_join_training SERVERS EPOCHS\n");
    return 2;
  }
  const int servers = std::atoi(argv[1]), epochs = std::atoi(argv[2]);
  try {
    const char* min = std::getenv("MIN_WORKERS");
    const char* max = std::getenv("MAX_WORKERS");
    strata::ParameterServerStrategy<strata::collective::Gloo, strata::ps::Async> strategy(
        {.servers = servers, .dispatch_batches = true, .admit_workers = true, .min_workers = min ? std::atoi(min) : 1,
         .max_workers = max ? std::atoi(max) : 0});
    auto net = strategy.scope([] {
      return strata::nn::Sequential(strata::nn::Linear(8, 16), strata::nn::ReLU(), strata::nn::Linear(16, 4));
    });
    auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.05); });
    strata::Generator g(1);
    const std::int64_t n = 6000;
    std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (i * 7) % 4;
    const strata::data::TensorDataset ds(strata::uniform({n, 8}, -1, 1, g), strata::from_vector<std::int64_t>({n}, labels));
    const strata::data::Pipeline input = strata::data::Pipeline(ds).batch(8);
    const char* kill_at = std::getenv("KILL_AT_STEP");
    const char* kill_rank = std::getenv("KILL_RANK");  // a first worker to kill instead of a joiner
    int steps_here = 0;
    bool first_step = true;
    for (auto epoch = strategy.first_epoch(); epoch < epochs; ++epoch) {
      if (strategy.joined() && first_step) std::printf("rank %d: joined at epoch %lld\n", strategy.rank(), static_cast<long long>(epoch));
      int steps = 0;
      for (auto& batch : strategy.distribute(input)) {
        const bool victim = strategy.joined() || (kill_rank && std::atoi(kill_rank) == strategy.rank());
        if (kill_at && victim && ++steps_here == std::atoi(kill_at)) {
          std::printf("rank %d: SIGKILL at its step %d\n", strategy.rank(), steps_here);
          std::fflush(stdout);
          std::raise(SIGKILL);
        }
        strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
          auto loss = strata::nn::cross_entropy(net(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
          opt.apply_gradients(ctx, strata::grad(loss, net.parameters()));
        }, batch);
        if (first_step) {
          std::printf("rank %d: first step %.0f ms after its start\n", strategy.rank(),
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
          std::fflush(stdout);
          first_step = false;
        }
        ++steps;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (strategy.is_server()) {
        const auto st = strategy.dispatch_stats();
        if (st.batches > 0)
          std::printf("rank %d: epoch %lld dispatched %lld batches: %lld completed, %lld again, %lld handed out again\n",
                      strategy.rank(), static_cast<long long>(epoch), static_cast<long long>(st.batches),
                      static_cast<long long>(st.completed), static_cast<long long>(st.repeated),
                      static_cast<long long>(st.redispatched));
      } else {
        std::printf("rank %d: epoch %lld: %d steps, ended %.0f ms after its start\n", strategy.rank(),
                    static_cast<long long>(epoch), steps,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      std::fflush(stdout);
    }
    std::uint32_t crc = 0;
    for (const strata::Tensor& p : net.parameters()) crc = strata::checkpoint::crc32c(p.raw_data(), p.nbytes(), crc);
    std::printf("rank %d: parameters crc32c %08x\n", strategy.rank(), crc);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parameter_server_join_training: %s\n", e.what());
    return 1;
  }
}

// A ParameterServerStrategy job (1 server, 2 workers; Mpi under mpirun, Gloo under strata-run)
// with one misbehaving rank, for tests/strategies/run_parameter_server_fault.sh:
//   stop-worker   Sync: worker rank 2 SIGSTOPs itself before its 4th push; the server names it
//   stop-server   the server SIGSTOPs itself 300 ms into the epoch; the workers name it
//   kill-server   the server SIGKILLs itself 300 ms into the epoch; the launcher ends the job
//   kill-worker   Async: worker rank 2 SIGKILLs itself at its 4th step; the server drops it and
//                 the rest go on until the launcher ends the job
//   carry-on      kill-worker under strata-run --keep-going (Gloo): the server drops the lost
//                 worker, the other one finishes the epoch, and the job's rate counts it alone
//   carry-on-dispatched  carry-on with dispatched batches: the batches the lost worker held go
//                 to the other, and the server counts every batch of the epoch completed
// The worker and step of the kill: rank 2 at its 4th step, or STRATA_PS_FAULT_VICTIM and
// STRATA_PS_FAULT_STEP (the fault suite draws them, with more workers).
//   bad-row       Sync, a row-sparse table: worker rank 2's 4th push to the table is a message
//                 naming a row past the table's end; the server refuses it, naming the worker
//   bad-count     the same with a row count larger than the message holds
//   bad-lookup    the same table on the servers only (remote_tables): worker rank 2's 4th
//                 lookup asks for a row past the block's end; the server refuses it, naming it
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif
#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

// A worker's table push, [k, flags, k row numbers, k rows of 4 floats], made by hand: what a
// broken or hostile worker could send. The server must refuse it before reading a row.
template <class S>
int hostile_rows(S& strategy, const std::string& mode) {
  strata::nn::Embedding table = strategy.scope([] { return strata::nn::Embedding(1000, 4, strata::TableGradient::row_sparse); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(table.parameters(), 0.1); });
  const strata::data::TensorDataset ds(strata::zeros({64, 1}), strata::zeros({64}, strata::DType::i64));
  int step = 0;
  for (auto& batch : strategy.distribute(strata::data::Pipeline(ds).batch(2 * 4))) {
    strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto rows = table(strata::from_vector<std::int64_t>({b.x.dim(0)}, std::vector<std::int64_t>(b.x.dim(0), 7)));
      auto grads = strata::grad(strata::sum(rows), table.parameters());
      if (++step == 4 && strategy.rank() == 2) {
        auto& t = strategy.transport();
        const auto v = static_cast<std::size_t>(strategy.shards().index_of(table.weight()));
        const std::size_t id = strategy.shards().of_variable[v].front();
        std::vector<std::int64_t> msg = {3, 1, 1, 2, mode == "bad-row" ? 5000 : 3};
        if (mode == "bad-count") msg[0] = 1 << 20;  // more rows than the bytes hold
        msg.resize(msg.size() + 6, 0);              // 3 rows of 4 floats
        int tag = strata::ps::kPushTag + static_cast<int>(id);
        if (mode == "bad-lookup") {  // [id, k, k row numbers]: a row past the block's 1000
          msg = {static_cast<std::int64_t>(id), 1, 5000};
          tag = strata::ps::kLookupTag;
        }
        auto r = t.isend(msg.data(), msg.size() * 8, t.roles().servers.front(), tag);
        t.wait_all(std::span(&r, 1), std::chrono::steady_clock::now() + std::chrono::seconds(10), [](const std::string&) {});
        return;  // and goes on: its next push waits for a server that has refused it
      }
      opt.apply_gradients(ctx, grads);
    }, batch);
  }
  std::printf("rank %d finished: the hostile push went unnoticed\n", strategy.rank());
  return 0;
}

template <class C, class Mode>
int run(const std::string& mode) {
  const bool carry_on = mode == "carry-on" || mode == "carry-on-dispatched";
  strata::ParameterServerStrategy<C, Mode> strategy(
      {.servers = 1, .dispatch_batches = mode == "carry-on-dispatched", .remote_tables = mode == "bad-lookup"});
  auto net = strategy.scope([] { return strata::nn::Sequential(strata::nn::Linear(8, 4)); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(net.parameters(), 0.01); });
  const std::int64_t n = carry_on ? 4000 : 200000;
  auto env_int = [](const char* name, int otherwise) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : otherwise;
  };
  const int victim = env_int("STRATA_PS_FAULT_VICTIM", 2), kill_step = env_int("STRATA_PS_FAULT_STEP", 4);
  strata::Generator g(1);
  const strata::data::TensorDataset ds(strata::uniform({n, 8}, -1, 1, g), strata::zeros({n}, strata::DType::i64));
  if (mode == "bad-row" || mode == "bad-count" || mode == "bad-lookup") return hostile_rows(strategy, mode);
  std::thread saboteur;
  if (strategy.is_server() && (mode == "stop-server" || mode == "kill-server"))
    saboteur = std::thread([mode] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::raise(mode == "stop-server" ? SIGSTOP : SIGKILL);
    });
  // A server fault comes 300 ms in, however fast the steps are: the workers go on for many
  // epochs so that it always lands while they train.
  const int epochs = mode == "stop-server" || mode == "kill-server" ? 1000 : 1;
  int step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (auto& batch : strategy.distribute(strata::data::Pipeline(ds).batch(2 * 4))) {
      strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
        auto loss = strata::nn::cross_entropy(net(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
        auto grads = strata::grad(loss, net.parameters());
        if (++step == kill_step && strategy.rank() == victim) {
          if (mode == "stop-worker") std::raise(SIGSTOP);
          if (mode == "kill-worker" || carry_on) {
            std::printf("[strata.fault] rank %d step %d: SIGKILL\n", strategy.rank(), step);
            std::fflush(stdout);
            std::raise(SIGKILL);
          }
        }
        opt.apply_gradients(ctx, grads);
      }, batch);
    }
  if (saboteur.joinable()) saboteur.join();
  if (carry_on || mode == "kill-worker") {  // Async goes on without the lost worker
    const double rate = strategy.job_examples_per_s(strategy.is_server() ? 0.0 : 1.0);
    std::printf("rank %d finished the epoch (%d steps here); workers still in the job: %.0f\n", strategy.rank(), step,
                rate);
    if (mode == "carry-on-dispatched" && strategy.is_server()) {
      const auto st = strategy.dispatch_stats();
      std::printf("rank %d dispatched %lld batches: %lld completed, %lld again, %lld handed out again\n", strategy.rank(),
                  static_cast<long long>(st.batches), static_cast<long long>(st.completed),
                  static_cast<long long>(st.repeated), static_cast<long long>(st.redispatched));
      return st.completed == st.batches && st.batches == n / 8 && st.redispatched >= 1 ? 0 : 1;
    }
    return 0;
  }
  std::printf("rank %d finished: the fault went unnoticed\n", strategy.rank());
  return 0;
}

template <class C>
int run_mode(const std::string& mode) {
  if (mode == "kill-worker" || mode == "carry-on" || mode == "carry-on-dispatched") return run<C, strata::ps::Async>(mode);
  if (mode == "stop-worker" || mode == "stop-server" || mode == "kill-server" || mode == "bad-row" || mode == "bad-count" ||
      mode == "bad-lookup")
    return run<C, strata::ps::Sync>(mode);
  return 2;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "", which = argc > 2 ? argv[2] : "mpi";
  try {
#if STRATA_HAS_MPI
    if (which == "mpi") return run_mode<strata::collective::Mpi>(mode);
#endif
#if STRATA_HAS_GLOO
    if (which == "gloo") return run_mode<strata::collective::Gloo>(mode);
#endif
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);
    strata::runtime::fail_job(e.what());  // under mpirun: the others stop now, not at their deadlines
    return 1;
  }
  std::printf("usage: parameter_server_fault stop-worker|stop-server|kill-server|kill-worker|carry-on|carry-on-dispatched|"
              "bad-row|bad-count|bad-lookup "
              "mpi|gloo\n");
  return 2;
}

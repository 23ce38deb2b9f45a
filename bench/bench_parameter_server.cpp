// ParameterServerStrategy<Mpi>'s push/pull beside raw MPI point-to-point of the same bytes, in
// the same run (mpirun -np 2: one server, one worker). A step is the worker's exchange as
// apply_gradients runs it (stage 1 of the update protocol, ReplicaStep::aggregate): push one variable's gradient
// of B bytes, pull B bytes back — the summed gradient (update on the workers: the transport
// alone), or the new values (update on the servers: plus the server's SGD pass). Raw: the
// worker MPI_Send's B bytes to the server, which MPI_Send's B bytes back. Rounds of each
// alternate; the medians of the worker's per-step times give 2B / t and the ratio ps/raw.
//
//   mpirun -np 2 bench_parameter_server [--max-bytes 67108864]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One variable of `count` floats: a model as scope() sees it.
struct Blob {
  std::vector<strata::Tensor> params;
  const std::vector<strata::Tensor>& parameters() const { return params; }
};

// `steps` push/pulls; the worker's time of each, in seconds.
std::vector<double> ps_round(bool update_on_servers, std::size_t count, int steps) {
  strata::ParameterServerStrategy<strata::collective::Mpi, strata::ps::Sync> s(
      {.servers = 1, .update_on_servers = update_on_servers, .partition_bytes = std::int64_t{1} << 40});
  auto blob = s.scope([&] {
    Blob b;
    b.params.push_back(strata::zeros({static_cast<std::int64_t>(count)}).requires_grad_(true));
    return b;
  });
  auto opt = s.scope([&] { return strata::optim::Sgd(blob.params, 1e-3); });
  blob.params[0].impl()->ag.grad = strata::full({static_cast<std::int64_t>(count)}, 1.0);
  const strata::data::TensorDataset ds(strata::zeros({steps, 1}), strata::zeros({steps}, strata::DType::i64));
  std::vector<double> times;
  for (auto& batch : s.distribute(strata::data::Pipeline(ds).batch(1))) {
    s.run([&](strata::ReplicaContext& ctx, const strata::data::Batch&) {
      // The exchange alone (what apply_gradients does before the worker's own update, if any).
      const auto t0 = Clock::now();
      strata::detail::step_of(ctx).aggregate(strata::Gradients{blob.params}, opt.lr());
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }, batch);
  }
  return times;
}

std::vector<double> raw_round(std::size_t bytes, int steps, int rank) {
  std::vector<char> out(bytes, 1), in(bytes);
  std::vector<double> times;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < steps; ++i) {
    if (rank == 1) {
      const auto t0 = Clock::now();
      MPI_Send(out.data(), static_cast<int>(bytes), MPI_BYTE, 0, 7, MPI_COMM_WORLD);
      MPI_Recv(in.data(), static_cast<int>(bytes), MPI_BYTE, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      MPI_Recv(in.data(), static_cast<int>(bytes), MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(in.data(), static_cast<int>(bytes), MPI_BYTE, 1, 8, MPI_COMM_WORLD);
    }
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t max_bytes = std::size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  strata::collective::Mpi::initialize();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "bench_parameter_server: run with mpirun -np 2 (one server, one worker)\n");
    return 2;
  }
  for (std::size_t bytes = 16384; bytes <= max_bytes; bytes *= 4) {
    const int steps = bytes <= (1u << 20) ? 100 : bytes <= (16u << 20) ? 20 : 8;
    for (bool on_servers : {false, true}) {
      std::vector<double> ps, raw;
      for (int round = 0; round < 3; ++round) {
        for (double t : raw_round(bytes, steps, rank)) raw.push_back(t);
        for (double t : ps_round(on_servers, bytes / sizeof(float), steps)) ps.push_back(t);
      }
      if (rank != 1) continue;
      const double p = median(ps), r = median(raw);
      std::printf("{\"bench\":\"ps_push_pull\",\"update_on\":\"%s\",\"bytes\":%zu,\"ps_ms\":%.4f,\"raw_ms\":%.4f,"
                  "\"ps_gbps\":%.3f,\"raw_gbps\":%.3f,\"ratio\":%.3f}\n",
                  on_servers ? "servers" : "workers", bytes, 1e3 * p, 1e3 * r, 2.0 * bytes / p / 1e9,
                  2.0 * bytes / r / 1e9, r / p);
      std::fflush(stdout);
    }
  }
  return 0;
}

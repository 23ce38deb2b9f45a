// strata::collective::Mpi beside raw MPI in the same run (mpirun -np 2): for each size, the
// median over iterations of the slowest rank's time for MPI_Allreduce / MPI_Bcast /
// MPI_Allgather / MPI_Reduce_scatter_block and for strata's call, alternating; busbw as in
// nccl-tests (PERF.md): strata's allgather and reduce_scatter of 64 KiB or more go through the
// host's shared memory when the ranks share it (collective::Mpi).
// One JSON line per (collective, size) with both busbw figures and the ratio strata/raw; and
// "allreduce_shared": strata's allreduce of a shared buffer (Mpi::shared_buffer, the gradient
// engine's buckets when all ranks share a host) against MPI_Allreduce of a plain one.
//
//   mpirun -np 2 bench_collectives_mpi [--max-bytes 268435456]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/mpi.hpp>

namespace {

double slowest(double s) {
  double m = 0;
  MPI_Allreduce(&s, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

template <class F>
double timed(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return slowest(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t max_bytes = std::size_t{256} << 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  strata::collective::Mpi c;
  const int n = c.size();
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const int iters = bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 30 : 9;
    std::vector<float> x(count, 1.0f), y(count);
    const std::size_t share = count / static_cast<std::size_t>(n);
    std::vector<float> mine(share, 1.0f);
    struct Series { const char* name; double factor; std::vector<double> raw, ours; };
    Series ar{"allreduce", 2.0 * (n - 1) / n, {}, {}}, bc{"broadcast", 1.0, {}, {}}, ag{"allgather", double(n - 1) / n, {}, {}};
    Series rs{"reduce_scatter", double(n - 1) / n, {}, {}};
    Series sh{"allreduce_shared", 2.0 * (n - 1) / n, {}, {}};
    std::vector<float> part(share);
    strata::Tensor shared = c.shared_buffer(static_cast<std::int64_t>(count), strata::DType::f32);  // undefined: skipped
    if (shared.defined()) shared.fill_(1.0);
    // Alternate which side goes first, so cache and page state favour neither.
    auto pair = [&](Series& s, auto raw, auto ours, int it) {
      if (it % 2) {
        s.raw.push_back(timed(raw));
        s.ours.push_back(timed(ours));
      } else {
        s.ours.push_back(timed(ours));
        s.raw.push_back(timed(raw));
      }
    };
    for (int it = 0; it < iters; ++it) {
      pair(ar, [&] { MPI_Allreduce(MPI_IN_PLACE, x.data(), int(count), MPI_FLOAT, MPI_SUM, c.comm()); },
           [&] { c.allreduce(std::span(x), strata::ReduceOp::Sum); }, it);
      pair(bc, [&] { MPI_Bcast(x.data(), int(count), MPI_FLOAT, 0, c.comm()); }, [&] { c.broadcast(std::span(x), 0); }, it);
      pair(ag, [&] { MPI_Allgather(mine.data(), int(share), MPI_FLOAT, y.data(), int(share), MPI_FLOAT, c.comm()); },
           [&] { c.allgather(std::span<const float>(mine), std::span(y.data(), share * static_cast<std::size_t>(n))); }, it);
      pair(rs, [&] { MPI_Reduce_scatter_block(x.data(), part.data(), int(share), MPI_FLOAT, MPI_SUM, c.comm()); },
           [&] { c.reduce_scatter(std::span<const float>(x.data(), share * static_cast<std::size_t>(n)), std::span(part),
                                  strata::ReduceOp::Sum); }, it);
    }
    // The shared buffer in a loop of its own: interleaved with the pairs above, its barriers'
    // exits shifted the next MPI call's timing (plain allreduce at 1 MiB read 0.92 with it
    // interleaved, 1.00 without).
    for (int it = 0; shared.defined() && it < iters; ++it)
      pair(sh, [&] { MPI_Allreduce(MPI_IN_PLACE, x.data(), int(count), MPI_FLOAT, MPI_SUM, c.comm()); },
           [&] { c.allreduce(std::span(shared.data<float>(), count), strata::ReduceOp::Sum); }, it);
    if (c.rank() == 0)
      for (const Series* s : {&ar, &bc, &ag, &rs, &sh}) {
        if (s->ours.empty()) continue;
        const double gb = static_cast<double>(s == &ag || s == &rs ? share * static_cast<std::size_t>(n) * 4 : bytes) / 1e9;
        const double raw = gb / median(s->raw) * s->factor, ours = gb / median(s->ours) * s->factor;
        std::printf("{\"bench\":\"collective\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"raw\":\"mpi\","
                    "\"raw_busbw_gbs\":%.3f,\"strata\":\"mpi\",\"strata_busbw_gbs\":%.3f,\"ratio\":%.3f}\n",
                    s->name, n, bytes, raw, ours, ours / raw);
      }
    std::fflush(stdout);
  }
}

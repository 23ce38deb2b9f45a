// Where gathering a row-sparse table's rows stops paying against the dense all-reduce: the
// measurement behind RowAggregationRule's ratio (strategy/detail/row_aggregation.hpp).
//
// mpirun -np 2: for tables of V rows x 64 floats and k distinct rows touched per rank, the
// gradient engine's step for the table (GradientEngine::finish) and the lazy SGD update after
// it, both ways (STRATA_ROW_AGGREGATION=gather and =dense), alternating; the median over
// iterations of the slowest rank. One JSON line per (V, k) with both times, dense/gather, and
// the gathered bytes over the dense table's (the quantity the rule compares with its ratio).
//
//   mpirun -np 2 bench_row_aggregation [--max-rows 1048576]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>

namespace {

using strata::Tensor;

double slowest(double s) {
  double m = 0;
  MPI_Allreduce(&s, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One way of aggregating a [rows, width] table: its engine (made under that way), its lazy SGD.
struct Way {
  Tensor table;
  std::vector<Tensor> params;
  std::unique_ptr<strata::GradientEngine<strata::collective::Mpi>> engine;
  std::unique_ptr<strata::optim::Sgd> opt;

  Way(strata::collective::Mpi& comm, std::int64_t rows, std::int64_t width, const char* way) {
    ::setenv("STRATA_ROW_AGGREGATION", way, 1);
    table = strata::zeros({rows, width}).requires_grad_();
    table.impl()->ag.row_sparse = true;  // as nn::Embedding(..., TableGradient::row_sparse) marks it
    params = {table};
    engine = std::make_unique<strata::GradientEngine<strata::collective::Mpi>>(comm, params);
    opt = std::make_unique<strata::optim::Sgd>(params, 0.01);
    ::unsetenv("STRATA_ROW_AGGREGATION");
  }
  // This rank's gradient as rows, summed across the ranks and applied.
  double step(const Tensor& index, const Tensor& values) {
    auto& ag = table.impl()->ag;
    ag.grad_index = index;
    ag.grad_rows = values;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    engine->finish();
    opt->step();
    return slowest(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::int64_t max_rows = std::int64_t{1} << 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--max-rows") max_rows = std::strtoll(argv[i + 1], nullptr, 10);
  strata::collective::Mpi comm;
  const int n = comm.size();
  constexpr std::int64_t width = 64;
  std::mt19937_64 rng(17 + static_cast<unsigned>(comm.rank()));
  for (std::int64_t rows = std::int64_t{1} << 14; rows <= max_rows; rows *= 8) {
    Way gather(comm, rows, width, "gather"), dense(comm, rows, width, "dense");
    for (std::int64_t k = 64; k <= rows; k *= 4) {
      // k distinct rows of this rank, ascending, with random values.
      std::vector<std::int64_t> all(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) all[static_cast<std::size_t>(r)] = r;
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<std::int64_t> mine(all.begin(), all.begin() + k);
      std::sort(mine.begin(), mine.end());
      const Tensor index = strata::from_vector<std::int64_t>({k}, mine);
      strata::Generator gen(3 + static_cast<std::uint64_t>(comm.rank()));
      const Tensor values = strata::uniform({k, width}, -1, 1, gen);
      const int iters = rows * width <= (1 << 20) ? 40 : rows * width <= (1 << 24) ? 12 : 5;
      std::vector<double> tg, td;
      for (int it = 0; it < iters; ++it) {
        if (it % 2 == 0) {
          tg.push_back(gather.step(index, values));
          td.push_back(dense.step(index, values));
        } else {
          td.push_back(dense.step(index, values));
          tg.push_back(gather.step(index, values));
        }
      }
      const double g = median(tg), d = median(td);
      const double byte_ratio = double(n) * double(k) * (8.0 + 4.0 * width) / (double(rows) * width * 4.0);
      if (comm.rank() == 0)
        std::printf("{\"bench\": \"row_aggregation\", \"ranks\": %d, \"rows\": %lld, \"width\": %lld, \"touched\": %lld, "
                    "\"gathered_over_dense_bytes\": %.4f, \"gather_ms\": %.3f, \"dense_ms\": %.3f, "
                    "\"dense_over_gather\": %.2f}\n",
                    n, static_cast<long long>(rows), static_cast<long long>(width), static_cast<long long>(k), byte_ratio,
                    g * 1e3, d * 1e3, d / g);
      std::fflush(stdout);
    }
  }
  return 0;
}

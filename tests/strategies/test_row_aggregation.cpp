// The gradient engine's aggregation of row-sparse tables (strategy/detail/row_aggregation.hpp):
// gathered rows or the dense all-reduce, each against a serial sum in double of every
// rank's own gradient, the same bits on every rank, and the way the byte rule takes.
#include "doctest.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <strata/strata.hpp>

#include "strategies/equivalence.hpp"  // ScopedEnv

using strata::Tensor;
using strata::TableGradient;
using strata::collective::InProcess;

namespace {

// Rank r's lookups: overlapping rows, duplicates, and nothing at all on rank 2.
std::vector<std::int64_t> lookups(int rank, std::int64_t rows) {
  switch (rank) {
    case 0: return {3, 7, 3, 0, rows - 1};
    case 1: return {7, 2, 2, 5, 3, 7};
    case 3: return {rows - 1, 1};
    default: return {};
  }
}

struct RankResult {
  std::vector<double> table_grad, bias_grad;
  bool rows = false;
  strata::GradientStats stats;
};

// One step on `ranks` InProcess ranks: each looks up its rows of a [rows, 4] table (and, with
// `dense_use` on rank 1, also uses the table densely), adds a dense bias; the engine sums.
std::vector<RankResult> one_step(int ranks, std::int64_t rows, bool dense_use, std::vector<std::vector<double>>& own) {
  std::vector<RankResult> out(static_cast<std::size_t>(ranks));
  own.assign(static_cast<std::size_t>(ranks), {});
  std::mutex mu;
  InProcess::launch(ranks, [&](InProcess& comm) {
    const int r = comm.rank();
    strata::Generator gen(5);
    Tensor table = strata::uniform({rows, 4}, -1, 1, gen).requires_grad_();
    table.impl()->ag.row_sparse = true;  // as nn::Embedding(..., TableGradient::row_sparse) marks it
    Tensor bias = strata::zeros({4}).requires_grad_();
    const std::vector<Tensor> params{table, bias};
    strata::GradientEngine<InProcess> engine(comm, params);
    const std::vector<std::int64_t> ix = lookups(r, rows);
    const Tensor idx = strata::from_vector<std::int64_t>({static_cast<std::int64_t>(ix.size())}, ix);
    const Tensor y = strata::embedding(table, idx, TableGradient::row_sparse) + bias;
    Tensor loss = strata::sum(y * y) * (0.5 + r);
    if (dense_use && r == 1) loss = loss + strata::sum(table * table) * 0.01;
    const strata::Gradients g = strata::grad(loss, params);
    {
      // This rank's own gradient, before the sum (read without making the rows dense).
      std::vector<double> mine(static_cast<std::size_t>(rows * 4), 0.0);
      if (table.has_row_grad()) {
        const strata::RowGrad rg = table.row_grad();
        const auto ixs = rg.indices.to_vector<std::int64_t>();
        const auto vals = rg.rows.to_vector<double>();
        for (std::size_t j = 0; j < ixs.size(); ++j)
          for (std::size_t c = 0; c < 4; ++c) mine[static_cast<std::size_t>(ixs[j]) * 4 + c] += vals[j * 4 + c];
      } else {
        mine = table.grad().to_vector<double>();
      }
      const std::lock_guard lock(mu);
      own[static_cast<std::size_t>(r)] = mine;
    }
    engine.finish();
    RankResult& res = out[static_cast<std::size_t>(r)];
    res.rows = table.has_row_grad();
    res.table_grad = g[0].to_vector<double>();
    res.bias_grad = g[1].to_vector<double>();
    res.stats = engine.stats();
  });
  return out;
}

void check_sums(const std::vector<RankResult>& got, const std::vector<std::vector<double>>& own) {
  std::vector<double> want(own[0].size(), 0.0);
  for (const auto& o : own)
    for (std::size_t i = 0; i < o.size(); ++i) want[i] += o[i];
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[0].table_grad[i] == doctest::Approx(want[i]).epsilon(1e-6));
  for (const RankResult& r : got) {
    CHECK(r.table_grad == got[0].table_grad);  // the same bits on every rank
    CHECK(r.bias_grad == got[0].bias_grad);
  }
}

}  // namespace

TEST_CASE("RowAggregation: gathered rows and the dense all-reduce are the serial sum, the same on every rank") {
  for (int ranks : {2, 3, 4})
    for (const char* way : {"gather", "dense"}) {
      CAPTURE(ranks);
      CAPTURE(way);
      const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", way);
      std::vector<std::vector<double>> own;
      const auto got = one_step(ranks, 40, false, own);
      check_sums(got, own);
      const bool gather = std::string(way) == "gather";
      for (const RankResult& r : got) {
        CHECK(r.rows == gather);  // gathered: the sum stays rows
        CHECK(r.stats.tables_gathered == (gather ? 1 : 0));
        CHECK(r.stats.tables_dense == (gather ? 0 : 1));
      }
      // The touched rows' lower bound, and what a gather sends: each rank's message padded to
      // the most rows any rank holds (rank 1: 4 distinct rows).
      const double per_row = 8.0 + 4 * 4.0;
      CHECK(got[1].stats.table_touched_bytes == 4 * per_row);
      if (gather) CHECK(got[0].stats.table_bytes_sent == 4 * per_row + 16);
      if (!gather) CHECK(got[0].stats.table_bytes_sent == 40 * 4 * 4.0);
    }
}

TEST_CASE("RowAggregation: a rank whose gradient of the table is dense sends every rank the dense way") {
  const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", "gather");
  std::vector<std::vector<double>> own;
  const auto got = one_step(3, 40, true, own);
  check_sums(got, own);
  for (const RankResult& r : got) CHECK(r.stats.tables_dense == 1);
}

TEST_CASE("RowAggregation: by the byte rule, a large table gathers and a small one goes dense") {
  std::vector<std::vector<double>> own;
  const auto large = one_step(3, 5000, false, own);
  check_sums(large, own);
  CHECK(large[0].stats.tables_gathered == 1);
  const auto small = one_step(3, 12, false, own);
  check_sums(small, own);
  CHECK(small[0].stats.tables_dense == 1);

  strata::detail::RowAggregationRule rule;  // 3 ranks x 4 rows x (8 + 4 x 4) bytes = 288
  rule.ratio = 1.0;
  CHECK(rule.gathers(3, 4, 18, 4, 4));       // <= 18 x 16 = 288
  CHECK_FALSE(rule.gathers(3, 4, 17, 4, 4));
  rule.ratio = 0.5;                          // the default: 288 <= 0.5 x 36 x 16 = 288
  CHECK(rule.gathers(3, 4, 36, 4, 4));
  CHECK_FALSE(rule.gathers(3, 4, 35, 4, 4));
  rule.way = strata::detail::RowAggregationRule::Way::dense;
  CHECK_FALSE(rule.gathers(3, 4, 5000, 4, 4));
}

TEST_CASE("RowAggregation: STRATA_ROW_AGGREGATION is checked") {
  const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", "sparse");
  CHECK_THROWS_WITH_AS(strata::detail::RowAggregationRule::from_env(),
                       doctest::Contains("STRATA_ROW_AGGREGATION=sparse: expected auto, gather or dense"),
                       strata::invalid_argument);
}

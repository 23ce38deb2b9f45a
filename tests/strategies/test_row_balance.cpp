// RowBalance: the division of a global batch's rows between replica threads by their measured
// speed, driven with synthetic costs (the policy is given the busy time).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include <strata/strategy/detail/row_balance.hpp>

namespace {

// Runs `steps` steps of `rows` rows where replica r is busy fixed + per_row[r] * its rows
// (seconds); returns the last step's counts.
std::vector<std::int64_t> drive(strata::detail::RowBalance& balance, int steps, std::int64_t rows,
                                const std::vector<double>& per_row, double fixed) {
  const std::size_t n = per_row.size();
  std::vector<std::int64_t> bounds(n + 1), counts(n);
  std::vector<double> busy(n);
  for (int s = 0; s < steps; ++s) {
    balance.bounds(rows, bounds);
    for (std::size_t r = 0; r < n; ++r) {
      counts[r] = bounds[r + 1] - bounds[r];
      busy[r] = fixed + per_row[r] * static_cast<double>(counts[r]);
    }
    balance.observe(counts, busy);
  }
  return counts;
}

}  // namespace

TEST_CASE("Strategy.RowBalance.EvenForReplicasOfEqualSpeed") {
  strata::detail::RowBalance balance(3);
  CHECK(drive(balance, 50, 96, {1e-5, 1e-5, 1e-5}, 2e-4) == std::vector<std::int64_t>{32, 32, 32});
}

TEST_CASE("Strategy.RowBalance.TheFasterReplicaTakesMoreRows") {
  // Replica 1 takes 1.5 times as long per row: without a fixed cost the counts go as the
  // speeds, 3:2 of 128 rows; with one, to where both are busy equally long.
  strata::detail::RowBalance balance(2);
  auto counts = drive(balance, 60, 128, {1e-5, 1.5e-5}, 0.0);
  CHECK(counts[0] + counts[1] == 128);
  CHECK(counts[0] >= 76);
  CHECK(counts[0] <= 78);
  strata::detail::RowBalance with_fixed(2);
  counts = drive(with_fixed, 200, 128, {1e-5, 1.5e-5}, 3e-4);
  CHECK(counts[0] >= 76);  // 76.8 rows each busy for the same time
  CHECK(counts[0] <= 77);
  const double busy0 = 3e-4 + 1e-5 * static_cast<double>(counts[0]);
  const double busy1 = 3e-4 + 1.5e-5 * static_cast<double>(counts[1]);
  CHECK(std::abs(busy0 - busy1) <= 0.02 * busy1);  // within about a row
}

TEST_CASE("Strategy.RowBalance.BoundsStayValid") {
  // A replica ten times slower is held at half an even share; small batches are divided
  // evenly; every replica gets a row; the boundaries rise and end at the batch.
  strata::detail::RowBalance balance(4);
  auto counts = drive(balance, 60, 256, {1e-5, 1e-4, 1e-5, 1e-5}, 0.0);
  CHECK(counts[1] == 32);  // (1 - kMaxSkew) / 4 of 256
  CHECK(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == 256);
  std::vector<std::int64_t> bounds(5);
  balance.bounds(12, bounds);
  CHECK(bounds == std::vector<std::int64_t>{0, 3, 6, 9, 12});
  for (std::int64_t rows : {16, 17, 40, 1000}) {
    balance.bounds(rows, bounds);
    CHECK(bounds.front() == 0);
    CHECK(bounds.back() == rows);
    for (std::size_t r = 0; r < 4; ++r) CHECK(bounds[r + 1] > bounds[r]);
  }
}

TEST_CASE("Strategy.RowBalance.IgnoresNoiseOfARow") {
  // Busy times that wobble by a few per cent around equal speeds keep the same boundaries.
  strata::detail::RowBalance balance(2);
  std::vector<std::int64_t> bounds(3), counts(2), first;
  for (int s = 0; s < 100; ++s) {
    balance.bounds(64, bounds);
    if (s == 10) first = bounds;
    if (s > 10) CHECK(bounds == first);
    counts = {bounds[1] - bounds[0], bounds[2] - bounds[1]};
    const double wobble = (s % 2 == 0) ? 1.02 : 0.98;
    balance.observe(counts, std::vector<double>{1e-5 * static_cast<double>(counts[0]) * wobble,
                                                1e-5 * static_cast<double>(counts[1]) / wobble});
  }
}

TEST_CASE("Strategy.RowBalance.StepsThatCannotBeMeasuredChangeNothing") {
  strata::detail::RowBalance balance(2);
  for (int s = 0; s < 20; ++s) balance.observe(std::vector<std::int64_t>{32, 0}, std::vector<double>{1e-3, 1e-3});
  for (int s = 0; s < 20; ++s) balance.observe(std::vector<std::int64_t>{32, 32}, std::vector<double>{1e-3, 0.0});
  CHECK(balance.share(0) == doctest::Approx(0.5));
}

// ParameterServerStrategy's placement and roles, checked without a job: every element of every
// variable on exactly one server, large variables split over all servers, the load balanced;
// roles from the options and the environment, and bad environment values named.
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <strata/strategy/parameter_server/placement.hpp>
#include <strata/strategy/parameter_server/roles.hpp>
#include <strata/support/error.hpp>

#include "doctest.hpp"

using strata::ps::Partition;
using strata::ps::VariableSize;

namespace {

// Every element of every variable covered exactly once, in (variable, offset) order.
void check_cover(const std::vector<VariableSize>& vars, const std::vector<Partition>& parts, int servers) {
  std::vector<std::int64_t> next(vars.size(), 0);
  std::size_t last_var = 0;
  for (const Partition& q : parts) {
    REQUIRE(q.variable < vars.size());
    CHECK(q.variable >= last_var);
    last_var = q.variable;
    CHECK(q.offset == next[q.variable]);
    CHECK(q.count > 0);
    CHECK((q.server >= 0 && q.server < servers));
    next[q.variable] = q.offset + q.count;
  }
  for (std::size_t i = 0; i < vars.size(); ++i) CHECK(next[i] == vars[i].numel);
}

}  // namespace

TEST_CASE("ParameterServer.Placement.SplitsLargeVariablesAndBalancesTheRest") {
  // The reference MLP's variables: 784x512, 512, 512x512, 512, 512x10, 10 (float32).
  const std::vector<VariableSize> mlp = {{784 * 512}, {512}, {512 * 512}, {512}, {5120}, {10}};
  for (int servers : {1, 2, 3, 4}) {
    std::vector<std::int64_t> load(static_cast<std::size_t>(servers), 0);
    const auto parts = strata::ps::plan_partitions(mlp, 0, load, 256 << 10);
    check_cover(mlp, parts, servers);
    std::int64_t total = 0;
    for (const auto& v : mlp) total += v.bytes();
    CHECK(std::accumulate(load.begin(), load.end(), std::int64_t{0}) == total);
    // The two big weights are split over every server; the rest (about 27 KiB) placed whole,
    // so no server is further from the mean than the largest whole variable.
    std::vector<int> pieces(mlp.size(), 0);
    for (const auto& q : parts) ++pieces[q.variable];
    CHECK(pieces[0] == servers);
    CHECK(pieces[2] == servers);
    for (std::size_t i : {1u, 3u, 4u, 5u}) CHECK(pieces[i] == 1);
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    CHECK(*hi - *lo <= 5120 * 4);
  }
}

TEST_CASE("ParameterServer.Placement.WholeVariablesGoLargestFirstToTheLeastLoaded") {
  const std::vector<VariableSize> vars = {{10}, {40}, {30}, {20}, {25}};
  std::vector<std::int64_t> load(2, 0);
  const auto parts = strata::ps::plan_partitions(vars, 0, load, 1 << 20);
  check_cover(vars, parts, 2);
  // 40 -> s0, 30 -> s1, 25 -> s1 (30 < 40), 20 -> s0 (40 < 55), 10 -> s1 (55 < 60): 60 / 65 elements
  CHECK(load[0] == 4 * 60);
  CHECK(load[1] == 4 * 65);
  // A second scope() continues from these loads, with ids after the first.
  const std::vector<VariableSize> more = {{50}};
  const auto extra = strata::ps::plan_partitions(more, vars.size(), load, 1 << 20);
  REQUIRE(extra.size() == 1);
  CHECK(extra[0].variable == vars.size());
  CHECK(extra[0].server == 0);
}

TEST_CASE("ParameterServer.Placement.TablesAreCutByRowsOverEveryServer") {
  // A 10-row table of width 3 (small, yet cut), a 2-row one over 3 servers, and a plain
  // variable that goes whole.
  const std::vector<VariableSize> vars = {{30, 4, 3}, {8, 4, 4}, {12}};
  std::vector<std::int64_t> load(3, 0);
  const auto parts = strata::ps::plan_partitions(vars, 0, load, 1 << 20);
  check_cover(vars, parts, 3);
  std::vector<Partition> table;
  for (const Partition& q : parts)
    if (q.variable == 0) table.push_back(q);
  REQUIRE(table.size() == 3);  // rows [0, 3), [3, 6), [6, 10)
  for (int s = 0; s < 3; ++s) {
    CHECK(table[static_cast<std::size_t>(s)].server == s);
    CHECK(table[static_cast<std::size_t>(s)].row_width == 3);
    CHECK(table[static_cast<std::size_t>(s)].offset % 3 == 0);
    CHECK(table[static_cast<std::size_t>(s)].count % 3 == 0);
  }
  CHECK(table[2].count == 12);
  std::vector<Partition> small;
  for (const Partition& q : parts)
    if (q.variable == 1) small.push_back(q);
  REQUIRE(small.size() == 2);  // 2 rows, 3 servers: no empty block
  CHECK(small[0].count == 4);
  CHECK(small[1].count == 4);
  for (const Partition& q : parts)
    if (q.variable == 2) CHECK(q.row_width == 0);
}

TEST_CASE("ParameterServer.Roles") {
  ::unsetenv("STRATA_SERVER_RANKS");
  ::unsetenv("STRATA_NUM_SERVERS");
  auto r = strata::ps::Roles::of(4);
  CHECK(r.servers == std::vector<int>{0});
  CHECK(r.workers == std::vector<int>{1, 2, 3});
  r = strata::ps::Roles::of(4, 2);
  CHECK(r.servers == std::vector<int>{0, 1});
  CHECK(r.index_of(3) == 1);
  ::setenv("STRATA_NUM_SERVERS", "3", 1);
  CHECK(strata::ps::Roles::of(5).servers == std::vector<int>{0, 1, 2});
  ::setenv("STRATA_SERVER_RANKS", "3,1", 1);  // names them; wins over the count
  r = strata::ps::Roles::of(5);
  CHECK(r.servers == std::vector<int>{1, 3});
  CHECK(r.workers == std::vector<int>{0, 2, 4});
  auto message = [](int world, int requested = 0) {
    try {
      strata::ps::Roles::of(world, requested);
    } catch (const strata::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ::setenv("STRATA_SERVER_RANKS", "1,x", 1);
  CHECK(message(4).find("STRATA_SERVER_RANKS=1,x: 'x' is not a rank") != std::string::npos);
  ::setenv("STRATA_SERVER_RANKS", "1,7", 1);
  CHECK(message(4).find("rank 7 is outside the job's 0..3") != std::string::npos);
  ::setenv("STRATA_SERVER_RANKS", "2,2", 1);
  CHECK(message(4).find("rank 2 is listed twice") != std::string::npos);
  ::setenv("STRATA_SERVER_RANKS", "0,1", 1);
  CHECK(message(2).find("has no worker") != std::string::npos);
  ::unsetenv("STRATA_SERVER_RANKS");
  ::setenv("STRATA_NUM_SERVERS", "0", 1);
  CHECK(message(4).find("STRATA_NUM_SERVERS=0") != std::string::npos);
  ::unsetenv("STRATA_NUM_SERVERS");
  CHECK(message(3, 3).find("has no worker") != std::string::npos);
}

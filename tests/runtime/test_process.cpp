#include "doctest.hpp"

#include <cstdlib>
#include <string>

#include <strata/runtime/process.hpp>
#include "support/fault.hpp"

namespace {
/// Sets variables for one test and clears every variable the runtime reads afterwards.
struct Env {
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    clear();
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
  }
  ~Env() { clear(); }
  static void clear() {
    for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_LOCAL_RANK",
                          "STRATA_LOCAL_SIZE", "STRATA_MASTER_ADDR", "STRATA_MASTER_PORT", "STRATA_RENDEZVOUS_DIR"})
      ::unsetenv(k);
  }
};

void expect_error(std::initializer_list<std::pair<const char*, const char*>> vars, const std::string& text) {
  Env e(vars);
  try {
    (void)strata::runtime::detect_process();
    FAIL("no error; expected '", text, "'");
  } catch (const strata::invalid_argument& err) {
    INFO(err.what());
    CHECK(std::string(err.what()).find(text) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("Runtime.Process.SingleMpirunAndEnv") {
  {
    Env e({});
    const auto p = strata::runtime::detect_process();
    CHECK(p.launcher == "single");
    CHECK(p.world_size == 1);
    CHECK(p.is_chief());
  }
  {
    Env e({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const auto p = strata::runtime::detect_process();
    CHECK(p.launcher == "mpirun");
    CHECK((p.rank == 2 && p.world_size == 4 && p.local_rank == 0 && p.local_size == 2));
  }
  {
    Env e({{"STRATA_RANK", "1"}, {"STRATA_WORLD_SIZE", "3"}, {"STRATA_MASTER_PORT", "4242"},
           {"STRATA_MASTER_ADDR", "10.0.0.7"}});
    const auto p = strata::runtime::detect_process();
    CHECK(p.launcher == "env");
    CHECK((p.rank == 1 && p.world_size == 3 && p.local_rank == 1 && p.local_size == 3));
    CHECK(p.master_port == 4242);
    CHECK(p.master_addr == "10.0.0.7");
  }
}

TEST_CASE("Runtime.Process.BadEnvironmentIsNamed") {
  expect_error({{"STRATA_RANK", "abc"}, {"STRATA_WORLD_SIZE", "2"}}, "STRATA_RANK='abc' is not an integer");
  expect_error({{"STRATA_RANK", "0"}, {"STRATA_WORLD_SIZE", "0"}}, "STRATA_WORLD_SIZE=0 is outside 1..");
  expect_error({{"STRATA_RANK", "4"}, {"STRATA_WORLD_SIZE", "4"}}, "STRATA_RANK=4 is not below STRATA_WORLD_SIZE=4");
  expect_error({{"STRATA_RANK", "-1"}, {"STRATA_WORLD_SIZE", "4"}}, "STRATA_RANK=-1 is outside 0..");
  expect_error({{"STRATA_WORLD_SIZE", "2"}}, "STRATA_RANK is not");
  expect_error({{"STRATA_RANK", "0"}}, "STRATA_WORLD_SIZE is not");
  expect_error({{"STRATA_MASTER_PORT", "70000"}}, "STRATA_MASTER_PORT=70000 is outside 1..65535");
  expect_error({{"STRATA_RANK", "0"}, {"STRATA_WORLD_SIZE", "2"}, {"STRATA_LOCAL_RANK", "2"}, {"STRATA_LOCAL_SIZE", "2"}},
               "STRATA_LOCAL_RANK=2 is outside 0..1");
  expect_error({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK=3 is outside 0..1");
}

TEST_CASE("Testing.FaultPointsMatchRankStepAndPoint") {
  ::setenv("STRATA_FAULT", "1;5;after_step;throw,*;7;before_save;throw,2;1;before_collective;skip", 1);
  CHECK_NOTHROW(strata::testing::fault_point(0, 5, "after_step"));   // another rank
  CHECK_NOTHROW(strata::testing::fault_point(1, 6, "after_step"));   // another step
  CHECK_NOTHROW(strata::testing::fault_point(1, 5, "before_save"));  // another point
  CHECK_THROWS_WITH_AS(strata::testing::fault_point(1, 5, "after_step"), "[strata.fault] injected at after_step, step 5",
                       strata::error);
  CHECK_THROWS_AS(strata::testing::fault_point(3, 7, "before_save"), strata::error);  // any rank
  // A kind the caller acts on comes back where the point handles it, and is an error elsewhere.
  CHECK(strata::testing::fault_point(2, 1, "before_collective", {"skip", "stall"}) == "skip");
  CHECK(strata::testing::fault_point(2, 2, "before_collective", {"skip", "stall"}).empty());
  CHECK_THROWS_WITH_AS(strata::testing::fault_point(2, 1, "before_collective"),
                       "[strata.fault] kind skip is not available at point before_collective", strata::invalid_argument);
  ::unsetenv("STRATA_FAULT");
}

// Every variable the library reads is in one table, read through one function: a name the
// table lacks is an error, a listed one reads as the environment holds it (empty: unset).
TEST_CASE("Runtime.Environment.OneTableOfVariables") {
  namespace env = strata::environment;
  for (const env::Variable& v : env::kVariables) {
    CAPTURE(v.name);
    CHECK(v.name.starts_with("STRATA_"));
    CHECK(!v.meaning.empty());
    CHECK(!v.default_value.empty());
    CHECK(!v.in_code.empty());
    CHECK(env::find(v.name) == &v);  // listed once
  }
  CHECK(env::find("STRATA_NOT_A_VARIABLE") == nullptr);
  CHECK_THROWS_WITH_AS(env::get("STRATA_NOT_A_VARIABLE"), doctest::Contains("not in strata's table"),
                       strata::invalid_argument);
  ::setenv("STRATA_SHM", "0", 1);
  CHECK(std::string(env::get("STRATA_SHM")) == "0");
  ::setenv("STRATA_SHM", "", 1);
  CHECK(env::get("STRATA_SHM") == nullptr);
  ::unsetenv("STRATA_SHM");
  CHECK(env::get("STRATA_SHM") == nullptr);
  ::setenv("STRATA_ROW_SPLIT", "sideways", 1);
  CHECK_THROWS_WITH_AS((void)env::either("STRATA_ROW_SPLIT", "even", "measured", "strata.strategy"),
                       doctest::Contains("STRATA_ROW_SPLIT='sideways' is neither even nor measured"),
                       strata::invalid_argument);
  ::unsetenv("STRATA_ROW_SPLIT");
  CHECK_THROWS_WITH_AS((void)env::to_int("STRATA_SPIN_US", "12x", 0, 10), doctest::Contains("is not an integer"),
                       strata::invalid_argument);
}

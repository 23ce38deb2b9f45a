// SplitChoice: the measured choice between splitting the optimizer update and every replica
// updating all of its copy, driven with synthetic costs (the policy is given the time).
#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <strata/reducer/partitioned_update.hpp>
#include <strata/reducer/split_choice.hpp>

namespace {

// The ways of `steps` steps (true: split) when a step that goes `split` at step s costs
// cost(s, split) microseconds. Step 0 splits, as a PartitionedUpdate's first step does.
std::vector<bool> drive(strata::detail::SplitChoice& choice, int steps, const std::function<double(int, bool)>& cost) {
  std::vector<bool> ways;
  bool split = true;
  for (int s = 0; s < steps; ++s) {
    ways.push_back(split);
    split = choice.after(split, cost(s, split));
  }
  return ways;
}

int count_split(const std::vector<bool>& ways, int from, int to) {
  int n = 0;
  for (int s = from; s < to; ++s) n += ways[static_cast<std::size_t>(s)] ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("Strategy.SplitChoice.KeepsTheSplitWhereItCostsLess") {
  strata::detail::SplitChoice choice;
  const auto ways = drive(choice, 2000, [](int, bool split) { return split ? 150.0 : 220.0; });
  CHECK(choice.holds_split());
  CHECK(choice.switches() == 0);
  CHECK(choice.cost(true) == doctest::Approx(150));
  CHECK(choice.cost(false) == doctest::Approx(220));
  // It probes the other way (steps 5..8 first), then ever more rarely: 64, 128, ... 512 apart.
  CHECK_FALSE(ways[5]);
  CHECK(count_split(ways, 0, 5) == 5);
  CHECK(count_split(ways, 9, 73) == 64);
  const int whole = 2000 - count_split(ways, 0, 2000);
  CHECK(whole >= 4 * 4);
  CHECK(whole <= 4 * 9);
}

TEST_CASE("Strategy.SplitChoice.UpdatesWholeCopiesWhereTheSplitCostsMore") {
  strata::detail::SplitChoice choice;
  const auto ways = drive(choice, 1000, [](int, bool split) { return split ? 600.0 : 200.0; });
  CHECK_FALSE(choice.holds_split());
  CHECK(choice.switches() == 1);
  CHECK(count_split(ways, 5, 9) == 0);  // the first probe, then it stays
  CHECK(count_split(ways, 9, 73) == 0);
  CHECK(count_split(ways, 0, 1000) <= 5 + 4 * 5);  // the first steps, and the probes of the split
}

TEST_CASE("Strategy.SplitChoice.FollowsTheHostWhenItChanges") {
  // Steps 0..599 a quiet host (the split cheaper), 600..1399 a slow one (writing into the
  // other copies costs four times as much), then quiet again.
  strata::detail::SplitChoice choice;
  auto slow = [](int s) { return s >= 600 && s < 1400; };
  const auto ways = drive(choice, 2400, [&](int s, bool split) {
    if (!split) return slow(s) ? 210.0 : 200.0;
    return slow(s) ? 620.0 : 150.0;
  });
  // The slow host is noticed within a few steps (the way held got dearer: a probe at once).
  CHECK(count_split(ways, 0, 600) >= 560);
  CHECK(count_split(ways, 610, 1400) <= 100);
  // When it turns quiet, the next probe, at most 8 x 64 steps later, takes the split again.
  CHECK(count_split(ways, 1400 + 8 * 64 + 8, 2400) >= 300);
  CHECK(choice.holds_split());
  CHECK(choice.switches() == 2);
}

TEST_CASE("Strategy.SplitChoice.LeavesOutWarmupAndSwitchSteps") {
  // The first steps and the first step after each switch (a replica copying the optimizer
  // state) cost 100 times more: they are not measured, so nothing changes.
  strata::detail::SplitChoice choice;
  bool last = true;
  std::vector<bool> ways;
  bool split = true;
  for (int s = 0; s < 600; ++s) {
    ways.push_back(split);
    const bool first = s < 2 || split != last;
    last = split;
    const double us = (split ? 150.0 : 220.0) * (first ? 100 : 1);
    split = choice.after(split, us);
  }
  CHECK(choice.holds_split());
  CHECK(choice.switches() == 0);
  CHECK(choice.cost(true) == doctest::Approx(150));
  CHECK(choice.cost(false) == doctest::Approx(220));
}

TEST_CASE("Strategy.SplitChoice.NeedsTheMarginToSwitch") {
  // The whole update 5 % cheaper is within the margin (10 %): the split is kept.
  strata::detail::SplitChoice choice;
  drive(choice, 500, [](int, bool split) { return split ? 200.0 : 190.0; });
  CHECK(choice.holds_split());
  CHECK(choice.switches() == 0);
  // With no margin it switches.
  strata::detail::SplitChoice eager({.margin = 0.0});
  drive(eager, 500, [](int, bool split) { return split ? 200.0 : 190.0; });
  CHECK_FALSE(eager.holds_split());
}

TEST_CASE("Strategy.SplitChoice.EnvironmentSetsTheDefault") {
  using strata::UpdateSplit;
  ::unsetenv("STRATA_SPLIT_UPDATE");
  CHECK(strata::default_split_update() == UpdateSplit::measured);
  const std::pair<const char*, UpdateSplit> known[] = {
      {"auto", UpdateSplit::measured}, {"1", UpdateSplit::on}, {"0", UpdateSplit::off}};
  for (const auto& [value, mode] : known) {
    ::setenv("STRATA_SPLIT_UPDATE", value, 1);
    CHECK(strata::default_split_update() == mode);
  }
  ::setenv("STRATA_SPLIT_UPDATE", "yes", 1);
  std::string what;
  try {
    (void)strata::default_split_update();
  } catch (const strata::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("STRATA_SPLIT_UPDATE='yes'") != std::string::npos);
  CHECK(what.find("0, 1, auto") != std::string::npos);
  ::unsetenv("STRATA_SPLIT_UPDATE");
}

// Row-sparse tables under the strategies on threads: lazy updates of the rows one device
// updates, whether the engine gathers the rows or sums the table dense, split or sharded.
#include "doctest.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "strategies/equivalence.hpp"


using strata::Tensor;
using equivalence::one_device_reference;

TEST_CASE("Strategy.SparseTableEquivalentToOneDevice") {
  // A table with row-sparse gradients, updated lazily (momentum only on the rows a step's
  // global batch looked up): N replicas update the rows one device does, though each
  // replica looks up rows of its own, whether the engine sums the table by gathering rows or
  // densely. And the dense rule on row-sparse gradients is a run with dense gradients.
  for (std::int64_t global : {25, 26}) {
    equivalence::Setup s;
    s.table = true;
    s.global_batch = global;
    s.examples = 20 * global + 10;
    const auto ref = one_device_reference(s);
    equivalence::Setup dense = s, dense_rule = s;
    dense.table_gradient = strata::TableGradient::dense;
    dense_rule.sparse_updates = strata::optim::SparseUpdates::dense;
    const auto dense_ref = one_device_reference(dense);
    CHECK(equivalence::max_relative_difference(one_device_reference(dense_rule), dense_ref) == 0);
    CHECK(equivalence::max_relative_difference(ref, dense_ref) > 1e-3);  // lazy momentum is another rule
    for (const char* way : {"gather", "dense"}) {
      const equivalence::ScopedEnv env("STRATA_ROW_AGGREGATION", way);
      const bool gather = std::string_view(way) == "gather";
      for (int n : {2, 3})
        for (int k : {1, 2}) {
          CAPTURE(global);
          CAPTURE(way);
          CAPTURE(n);
          CAPTURE(k);
          equivalence::Setup sk = s;
          sk.accumulation = k;
          strata::MirroredStrategy mirrored(n);
          CHECK(equivalence::train_difference(mirrored, sk, ref) < 1e-5);
          const strata::GradientStats st = mirrored.gradient_stats();
          CHECK(st.tables_gathered == (gather ? st.steps : 0));  // the way asked for, every step
          CHECK(st.tables_dense == (gather ? 0 : st.steps));
          CHECK(st.table_touched_bytes > 0);
          strata::MirroredStrategy split(n, {.split_update = strata::UpdateSplit::on});
          CHECK(equivalence::train_difference(split, sk, ref) < 1e-5);
          strata::CentralStorageStrategy central(n);
          CHECK(equivalence::train_difference(central, sk, ref) < 1e-5);
        }
    }
    for (int n : {2, 3})  // sharded sums: the table is one more dense bucket
      for (int k : {1, 2}) {
        equivalence::Setup sk = s;
        sk.accumulation = k;
        strata::MirroredStrategy sharded(n, {.split_update = strata::UpdateSplit::on,
                                             .gradients = strata::GradientLayout::sharded});
        CHECK(equivalence::train_difference(sharded, sk, ref) < 1e-5);
        CHECK(sharded.gradient_stats().tables_gathered + sharded.gradient_stats().tables_dense == 0);
      }
  }
}

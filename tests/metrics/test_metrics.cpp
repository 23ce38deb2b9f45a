// The streaming metrics of metrics/: each figure against a loop written from its definition,
// padding rows left out, labels that are no class named, updates from several replica threads
// summed on read, and a read or reset inside Strategy::run refused.
#include "doctest.hpp"
#include "support/labels.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <strata/strata.hpp>

using namespace strata;

namespace {

/// A batch of `rows` rows whose last `padding` rows are padding (label kPadLabel).
data::Batch batch_of(const Tensor& x, const Tensor& y, std::int64_t padding) {
  data::Batch b;
  b.x = x;
  b.y = y;
  b.size = x.dim(0);
  b.padding = padding;
  b.global_size = b.size - padding;
  return b;
}

}  // namespace

TEST_CASE("Metrics.MeanAndSumOfValues") {
  OneDeviceStrategy one;
  metrics::Mean mean;
  metrics::Sum sum;
  CHECK(std::isnan(mean.result(one)));  // nothing added yet
  CHECK(sum.result(one) == 0);
  const Tensor a = from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  mean.update(a);
  sum.update(a);
  mean.update(10.0, 2.0);  // the value 10 with weight 2
  sum.update(10.0);
  CHECK(mean.result(one) == doctest::Approx((21.0 + 20.0) / 8.0));
  CHECK(sum.result(one) == doctest::Approx(31.0));
  // Per-example values of a batch whose last row is padding: that row counts nowhere.
  mean.reset();
  sum.reset();
  const Tensor per_example = from_vector<double>({4}, {1.0, 2.0, 4.0, 1000.0});
  const data::Batch b = batch_of(zeros({4, 3}), labels_of({0, 1, 2, kPadLabel}), 1);
  mean.update(per_example, b);
  sum.update(per_example, b);
  CHECK(mean.result(one) == doctest::Approx(7.0 / 3.0));
  CHECK(sum.result(one) == doctest::Approx(7.0));
  // Values that are not one per row of the batch are named.
  CHECK_THROWS_WITH_AS(mean.update(from_vector<float>({3}, {1, 2, 3}), b), doctest::Contains("one row per row of the batch"),
                       invalid_argument);
}

TEST_CASE("Metrics.AccuracyAndConfusionCountLeavePaddingOut") {
  OneDeviceStrategy one;
  // Rows' argmax: 2, 0, 1, 1, 0 (the last row is padding).
  const Tensor logits = from_vector<float>({5, 3}, {0, 1, 5, 3, 1, 2, 0, 9, 1, -1, 4, 0, 7, 1, 1});
  const Tensor labels = labels_of({2, 1, 1, 0, kPadLabel});
  metrics::Accuracy accuracy;
  metrics::ConfusionCount confusion(3);
  accuracy.update(logits, labels);
  confusion.update(logits, labels);
  const auto c = accuracy.counts(one);
  CHECK(c.correct == 2);  // rows 0 and 2
  CHECK(c.examples == 4);
  CHECK(accuracy.result(one) == doctest::Approx(0.5));
  // label-major: (2->2), (1->0), (1->1), (0->1)
  CHECK(confusion.result(one).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 0, 1, 1, 0, 0, 0, 1});
  // The same counts as count_correct, which knows nothing of metrics.
  CHECK(count_correct(logits, labels) == c.correct);

  CHECK_THROWS_WITH_AS(accuracy.update(logits, labels_of({2, 1, 3, 0, 0})),
                       doctest::Contains("label 3 in row 2 is not a class of the 3 logits"), invalid_argument);
  CHECK_THROWS_WITH_AS(confusion.update(zeros({2, 4}), labels_of({0, 1})), doctest::Contains("logits have 4 classes"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(accuracy.update(logits, labels_of({0, 1})), doctest::Contains("labels must be [5]"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(metrics::ConfusionCount(0), doctest::Contains("1..4096 classes"), invalid_argument);
}

TEST_CASE("Metrics.ReplicasUpdateTheirOwnSlotsAndAReadSumsThem") {
  // Each of 3 replica threads adds its rows many times at once; the read is the serial sum.
  MirroredStrategy<> strategy(3);
  metrics::Accuracy accuracy;
  metrics::Mean mean;
  Generator g(5);
  const Tensor logits = uniform({300, 4}, -1, 1, g);
  std::vector<std::int64_t> y(300);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(g.below(4));
  const Tensor labels = labels_of(y);
  data::Batch global = batch_of(logits, labels, 0);
  constexpr int kRepeats = 50;
  for (int k = 0; k < kRepeats; ++k)
    strategy.run([&](ReplicaContext&, const data::Batch& b) {
      accuracy.update(b.x, b.y);
      mean.update(static_cast<double>(b.size));
    }, global);
  const auto c = accuracy.counts(strategy);
  CHECK(c.examples == kRepeats * 300);
  CHECK(c.correct == kRepeats * count_correct(logits, labels));
  CHECK(mean.result(strategy) == doctest::Approx(100.0));  // 3 replicas of 100 rows each

  // Read or reset while the replicas may be updating: refused, naming the metric.
  CHECK_THROWS_WITH_AS(strategy.run([&](ReplicaContext&) { (void)accuracy.result(strategy); }),
                       doctest::Contains("Accuracy.result() inside Strategy::run"), std::exception);
  CHECK_THROWS_WITH_AS(strategy.run([&](ReplicaContext&) { mean.reset(); }),
                       doctest::Contains("Mean.reset() inside Strategy::run"), std::exception);
}

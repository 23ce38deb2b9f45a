// End to end on the real Fashion-MNIST files: the reference MLP trained one epoch under
// OneDeviceStrategy reaches the accuracy bar, and the same seed gives the same trajectory.
#include "doctest.hpp"

#include <vector>

#include <strata/kernels/cpu/blas_core.hpp>

#include "support/train_step.hpp"

namespace {

/// The loss of every step of `epochs` epochs (at most `max_steps` steps each, -1: all) of the
/// reference MLP, batch 64, SGD lr 0.05 momentum 0.9, data shuffled with `seed`.
std::vector<double> train_mlp(std::uint64_t seed, int epochs, std::int64_t max_steps, double* accuracy = nullptr) {
  strata::manual_seed(seed);
  strata::OneDeviceStrategy s;
  auto model = s.scope([] { return strata::models::fashion_mnist_mlp(); });
  auto opt = s.scope([&] { return strata::optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  auto pipeline = strata::data::Pipeline(strata::data::fashion_mnist_train(STRATA_TEST_FASHION_MNIST_DIR)).shuffle(seed).batch(64);
  if (max_steps >= 0) pipeline = pipeline.take(max_steps);
  auto data = s.distribute(pipeline);
  std::vector<double> losses;
  for (int e = 0; e < epochs; ++e)
    for (auto& batch : data) losses.push_back(support::train_step(s, model, opt, batch));
  if (accuracy) *accuracy = support::accuracy(model, strata::data::fashion_mnist_test(STRATA_TEST_FASHION_MNIST_DIR));
  return losses;
}

}  // namespace

TEST_CASE("Integration.FashionMnist.MlpOneEpochReachesEightyPercent") {
  strata::kernels::cpu::set_blas_threads(1);
  double accuracy = 0;
  const std::vector<double> losses = train_mlp(0, 1, -1, &accuracy);
  MESSAGE("MLP 1 epoch, seed 0: test accuracy ", accuracy);
  CHECK(losses.size() == 938);
  CHECK(accuracy >= 0.80);
  CHECK(losses.back() < losses.front());
}

TEST_CASE("Integration.FashionMnist.SameSeedSameTrajectory") {
  strata::kernels::cpu::set_blas_threads(1);
  const std::vector<double> a = train_mlp(3, 1, 60), b = train_mlp(3, 1, 60);
  CHECK(a == b);  // bitwise
  CHECK(train_mlp(4, 1, 60) != a);
}

// End to end on the real Fashion-MNIST files: the example's training loop under
// OneDeviceStrategy reaches the accuracy bar, and the same seed gives the same trajectory.
#include "doctest.hpp"

#include "fashion_mnist/train.hpp"

TEST_CASE("Integration.FashionMnist.MlpOneEpochReachesEightyPercent") {
  strata::kernels::cpu::set_blas_threads(1);
  fmnist::Config cfg;
  cfg.data_dir = STRATA_TEST_FASHION_MNIST_DIR;
  cfg.progress = false;
  strata::OneDeviceStrategy s;
  const auto r = fmnist::train(s, cfg);
  MESSAGE("MLP 1 epoch, seed 0: test accuracy ", r.test_accuracy, ", ", r.examples_per_s, " examples/s");
  CHECK(r.steps == 938);
  CHECK(r.test_accuracy >= 0.80);
  CHECK(r.final_loss < r.losses.front());
}

TEST_CASE("Integration.FashionMnist.SameSeedSameTrajectory") {
  strata::kernels::cpu::set_blas_threads(1);
  fmnist::Config cfg;
  cfg.data_dir = STRATA_TEST_FASHION_MNIST_DIR;
  cfg.progress = false;
  cfg.evaluate = false;
  cfg.max_steps = 60;
  cfg.seed = 3;
  strata::OneDeviceStrategy s;
  const auto a = fmnist::train(s, cfg);
  const auto b = fmnist::train(s, cfg);
  CHECK(a.losses == b.losses);  // bitwise
  cfg.seed = 4;
  CHECK(fmnist::train(s, cfg).losses != a.losses);
}

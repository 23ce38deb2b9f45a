/// \file
/// The reference Fashion-MNIST models (28×28 grey images, 10 classes), the two the trainers,
/// benchmarks and tests of this project measure: an MLP 784-512-512-10 and a CNN
/// conv5x5(32) → pool2 → conv5x5(64) → pool2 → fc128 → fc10, both with ReLU. The same shapes
/// as bench/*.py builds in PyTorch, so the two train the same networks.
#pragma once

#include <string>

#include <strata/nn/layers.hpp>
#include <strata/nn/sequential.hpp>
#include <strata/support/check.hpp>

namespace strata::models {

inline nn::Sequential fashion_mnist_mlp() {
  using namespace strata::nn;
  return Sequential(Flatten(), Linear(784, 512), ReLU(), Linear(512, 512), ReLU(), Linear(512, 10));
}

inline nn::Sequential fashion_mnist_cnn() {
  using namespace strata::nn;
  return Sequential(Conv2d(1, 32, 5), ReLU(), MaxPool2d(2), Conv2d(32, 64, 5), ReLU(), MaxPool2d(2), Flatten(),
                    Linear(1024, 128), ReLU(), Linear(128, 10));
}

/// "mlp" or "cnn"; any other name is an error naming both.
inline nn::Sequential fashion_mnist(const std::string& name) {
  if (name == "mlp") return fashion_mnist_mlp();
  if (name == "cnn") return fashion_mnist_cnn();
  STRATA_THROW(invalid_argument, "strata.models", "unknown Fashion-MNIST model '", name, "' (expected mlp or cnn)");
}

}  // namespace strata::models

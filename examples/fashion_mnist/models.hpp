/// \file
/// The reference Fashion-MNIST models: an MLP 784-512-512-10 and a CNN
/// conv5x5(32) -> pool2 -> conv5x5(64) -> pool2 -> fc128 -> fc10, both with ReLU.
#pragma once

#include <stdexcept>
#include <string>

#include <strata/strata.hpp>

namespace fmnist {

inline strata::nn::Sequential make_mlp() {
  using namespace strata::nn;
  return Sequential(Flatten(), Linear(784, 512), ReLU(), Linear(512, 512), ReLU(), Linear(512, 10));
}

inline strata::nn::Sequential make_cnn() {
  using namespace strata::nn;
  return Sequential(Conv2d(1, 32, 5), ReLU(), MaxPool2d(2), Conv2d(32, 64, 5), ReLU(), MaxPool2d(2), Flatten(),
                    Linear(1024, 128), ReLU(), Linear(128, 10));
}

/// "mlp" or "cnn".
inline strata::nn::Sequential make_model(const std::string& name) {
  if (name == "mlp") return make_mlp();
  if (name == "cnn") return make_cnn();
  throw strata::invalid_argument("[strata.example] unknown model '" + name + "' (expected mlp or cnn)");
}

}  // namespace fmnist

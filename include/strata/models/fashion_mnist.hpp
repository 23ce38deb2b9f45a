/// \file
/// The reference Fashion-MNIST models (28×28 grey images, 10 classes), the ones the trainers,
/// benchmarks and tests of this project measure: an MLP 784-512-512-10, a CNN
/// conv5x5(32) → pool2 → conv5x5(64) → pool2 → fc128 → fc10, both with ReLU, and a small
/// ResNet of basic blocks with batch normalisation. The same shapes as bench/*.py builds in
/// PyTorch, so the two train the same networks.
#pragma once

#include <string>

#include <strata/nn/layers.hpp>
#include <strata/nn/normalization.hpp>
#include <strata/nn/residual.hpp>
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

/// A ResNet of 0.3 M parameters: a 3x3 stem of 32 channels with batch norm at 28×28, then
/// three basic blocks that each halve the image and double the channels (32 at 14×14, 64 at
/// 7×7, 128 at 4×4), global average pooling and fc10. `statistics` picks per-replica
/// BatchNorm or SyncBatchNorm throughout.
inline nn::Sequential fashion_mnist_resnet(BatchStatistics statistics = BatchStatistics::per_replica) {
  using namespace strata::nn;
  Generator& gen = default_generator();
  return Sequential(Conv2d(1, 32, 3, 1, 1, false), BatchNorm2d(32, 1e-5, 0.1, true, statistics), ReLU(),
                    BasicBlock(32, 32, 2, statistics, gen), BasicBlock(32, 64, 2, statistics, gen),
                    BasicBlock(64, 128, 2, statistics, gen), GlobalAvgPool2d(), Linear(128, 10));
}

/// "mlp", "cnn", "resnet" or "resnet_sync" (SyncBatchNorm); any other name is an error naming them.
inline nn::Sequential fashion_mnist(const std::string& name) {
  if (name == "mlp") return fashion_mnist_mlp();
  if (name == "cnn") return fashion_mnist_cnn();
  if (name == "resnet") return fashion_mnist_resnet();
  if (name == "resnet_sync") return fashion_mnist_resnet(BatchStatistics::global);
  STRATA_THROW(invalid_argument, "strata.models", "unknown Fashion-MNIST model '", name,
               "' (expected mlp, cnn, resnet or resnet_sync)");
}

}  // namespace strata::models

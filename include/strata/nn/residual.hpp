/// \file
/// BasicBlock: the residual block of ResNet-18/34: two 3x3 convolutions with batch norm and a
/// shortcut (a 1x1 convolution with batch norm when the shape changes). Names follow
/// torchvision ("conv1", "bn1", "conv2", "bn2", "downsample.0", "downsample.1").
#pragma once

#include <cstdint>
#include <memory>

#include <strata/nn/layers.hpp>         // Conv2d
#include <strata/nn/module.hpp>
#include <strata/nn/normalization.hpp>  // BatchNorm
#include <strata/nn/sequential.hpp>     // the shortcut's layers

namespace strata::nn {

/// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); conv1 has stride `stride`.
/// `statistics` picks per-replica BatchNorm or SyncBatchNorm for every norm in the block.
class BasicBlock : public Module {
 public:
  BasicBlock(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride = 1,
             BatchStatistics statistics = BatchStatistics::per_replica, Generator& gen = default_generator(),
             DType dtype = DType::f32) {
    conv1_ = &make_module<Conv2d>("conv1", in_channels, out_channels, 3, stride, 1, false, gen, dtype);
    bn1_ = &make_module<BatchNorm2d>("bn1", out_channels, 1e-5, 0.1, true, statistics, dtype);
    conv2_ = &make_module<Conv2d>("conv2", out_channels, out_channels, 3, 1, 1, false, gen, dtype);
    bn2_ = &make_module<BatchNorm2d>("bn2", out_channels, 1e-5, 0.1, true, statistics, dtype);
    if (stride != 1 || in_channels != out_channels)
      shortcut_ = &make_module<Sequential>("downsample", Conv2d(in_channels, out_channels, 1, stride, 0, false, gen, dtype),
                                           BatchNorm2d(out_channels, 1e-5, 0.1, true, statistics, dtype));
  }
  Tensor forward(const Tensor& x) override {
    // The norms fuse the ReLU, the shortcut's addition with it (one pass each, forward and back).
    // The shortcut runs first, while x is still in cache from the layer that wrote it (and so
    // its backward runs last, adding into x's gradient just after conv1's backward wrote it).
    const Tensor shortcut = shortcut_ ? (*shortcut_)(x) : x;
    const Tensor h = bn1_->call_fused((*conv1_)(x), Activation::relu);
    const Tensor c = (*conv2_)(h);
    return bn2_->call([&] { return bn2_->forward_fused(c, Activation::relu, shortcut); });
  }

 private:
  Conv2d* conv1_ = nullptr;
  Conv2d* conv2_ = nullptr;
  BatchNorm2d* bn1_ = nullptr;
  BatchNorm2d* bn2_ = nullptr;
  Sequential* shortcut_ = nullptr;
};

}  // namespace strata::nn

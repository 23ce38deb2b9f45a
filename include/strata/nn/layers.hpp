/// \file
/// The standard layers: Linear, Conv2d, MaxPool2d, AvgPool2d, GlobalAvgPool2d, the activations
/// (ReLU, GELU, Tanh, Sigmoid, Softmax), Dropout, Flatten.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/nn/init.hpp>    // default_generator, kaiming_uniform_
#include <strata/nn/module.hpp>  // Module
#include <strata/ops/conv.hpp>   // conv2d, max_pool2d
#include <strata/ops/dropout.hpp>
#include <strata/ops/elementwise.hpp>
#include <strata/ops/linalg.hpp>  // linear
#include <strata/ops/pool.hpp>     // avg_pool2d, global_avg_pool2d
#include <strata/ops/shape_ops.hpp>
#include <strata/ops/softmax.hpp>
#include <strata/support/replica_thread.hpp>  // replica_info: Dropout's key

namespace strata::nn {

/// y = x W^T + b, W [out, in]. Initialised like torch.nn.Linear: U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, bool bias = true, Generator& gen = default_generator(),
         DType dtype = DType::f32) {
    STRATA_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): features must be positive");
    Tensor w = Tensor::empty({out, in}, dtype);
    init::kaiming_uniform_(w, gen, std::sqrt(5.0));
    weight_ = register_parameter("weight", w);
    if (bias) {
      Tensor b = Tensor::empty({out}, dtype);
      init::uniform_(b, 1.0 / std::sqrt(static_cast<double>(in)), gen);
      bias_ = register_parameter("bias", b);
    }
  }
  Tensor forward(const Tensor& x) override { return linear(x, weight_, bias_); }
  bool fuses_activation() const override { return true; }
  Tensor forward_fused(const Tensor& x, Activation act) override { return linear(x, weight_, bias_, act); }
  const Tensor& weight() const noexcept { return weight_; }
  const Tensor& bias() const noexcept { return bias_; }

 private:
  Tensor weight_, bias_;
};

/// 2-D convolution over NCHW with a square kernel. Initialised like torch.nn.Conv2d.
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = true, Generator& gen = default_generator(), DType dtype = DType::f32)
      : stride_(stride), padding_(padding) {
    STRATA_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0, "Conv2d(", in_channels, ", ", out_channels, ", ",
                 kernel, "): sizes must be positive");
    Tensor w = Tensor::empty({out_channels, in_channels, kernel, kernel}, dtype);
    init::kaiming_uniform_(w, gen, std::sqrt(5.0));
    weight_ = register_parameter("weight", w);
    if (bias) {
      Tensor b = Tensor::empty({out_channels}, dtype);
      init::uniform_(b, 1.0 / std::sqrt(static_cast<double>(in_channels * kernel * kernel)), gen);
      bias_ = register_parameter("bias", b);
    }
  }
  Tensor forward(const Tensor& x) override { return conv2d(x, weight_, bias_, stride_, padding_); }
  bool fuses_activation() const override { return true; }
  Tensor forward_fused(const Tensor& x, Activation act) override {
    return conv2d(x, weight_, bias_, stride_, padding_, act);
  }
  const Tensor& weight() const noexcept { return weight_; }
  const Tensor& bias() const noexcept { return bias_; }

 private:
  Tensor weight_, bias_;
  std::int64_t stride_, padding_;
};

/// max(x, 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

/// tanh(x), elementwise.
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

/// 1 / (1 + exp(-x)), elementwise.
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

/// x Φ(x), elementwise (the exact form; torch.nn.GELU()).
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

/// softmax along an axis (the last by default).
class Softmax : public Module {
 public:
  explicit Softmax(int axis = -1) : axis_(axis) {}
  Tensor forward(const Tensor& x) override { return softmax(x, axis_); }

 private:
  int axis_;
};

/// 2-D max pooling; the stride defaults to the window.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0)
      : kernel_(kernel), stride_(stride == 0 ? kernel : stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_); }

 private:
  std::int64_t kernel_, stride_, padding_;
};

/// 2-D average pooling (padding counted in the divisor); the stride defaults to the window.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0)
      : kernel_(kernel), stride_(stride == 0 ? kernel : stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_); }

 private:
  std::int64_t kernel_, stride_, padding_;
};

/// [N, C, H, W] -> [N, C], the mean of each plane (torch's AdaptiveAvgPool2d(1) + flatten).
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }
};

/// [N, ...] -> [N, prod(...)].
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x); }
};

/// Inverted dropout whose masks are keyed, not drawn in sequence (DropoutKey): inside
/// Strategy::run(fn, batch) an element's mask is a function of the layer's seed, the step's
/// (epoch, batch index) and the element's row among the step's global rows (and its place in
/// the row). So replicas draw different masks for their different rows, N replicas drop what
/// one device drops, and a resumed run drops what it would have dropped, however the batch is
/// split. The k-th row the layer sees in a step is global row Batch::global_offset + k, so
/// micro-batches of a replica's rows, run in order, continue its rows. Outside a strategy's
/// step each call draws a new step from the layer's generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& seed_from = default_generator()) : p_(p), gen_(seed_from.next()) {
    STRATA_CHECK(p >= 0.0 && p < 1.0, "Dropout probability must be in [0, 1), got ", p);
  }
  Tensor forward(const Tensor& x) override {
    if (!is_training() || p_ == 0.0) return x;
    return dropout(x, p_, next_key(x), true);
  }
  /// The generator the layer's seed lives in (saved and restored by checkpoints); inside a
  /// strategy's step it is only read.
  Generator& generator() noexcept { return gen_; }

 protected:
  void own_generators(std::vector<Generator*>& out) override { out.push_back(&gen_); }

 private:
  DropoutKey next_key(const Tensor& x) {
    const auto st = gen_.state();
    const std::uint64_t seed = Generator::derive(st[0] ^ st[2], st[1] ^ st[3]);
    const ReplicaInfo& info = replica_info();
    if (!info.has_batch) return {seed, gen_.next(), 0};
    if (!stepped_ || info.epoch != epoch_ || info.batch_index != index_) {  // a new step: its rows start again
      stepped_ = true;
      epoch_ = info.epoch;
      index_ = info.batch_index;
      rows_seen_ = 0;
    }
    const DropoutKey key{seed,
                         Generator::derive(static_cast<std::uint64_t>(info.epoch), static_cast<std::uint64_t>(info.batch_index)),
                         info.first_row + rows_seen_};
    rows_seen_ += x.ndim() == 0 ? 1 : x.dim(0);
    return key;
  }

  double p_;
  Generator gen_;
  bool stepped_ = false;
  std::int64_t epoch_ = 0, index_ = 0, rows_seen_ = 0;  // the step the layer last ran in, and its rows so far
};

}  // namespace strata::nn

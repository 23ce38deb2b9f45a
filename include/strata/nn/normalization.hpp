/// \file
/// Normalisation layers: LayerNorm, BatchNorm1d/2d (statistics over the replica's rows, as
/// PyTorch DDP's BatchNorm) and SyncBatchNorm (statistics over the global batch of the
/// replicas in sync). Parameter and buffer names are PyTorch's.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <strata/nn/module.hpp>
#include <strata/ops/normalization.hpp>
#include <strata/tensor/factory.hpp>  // ones, zeros

namespace strata::nn {

/// Normalises the last axis (of extent `width`) to mean 0 and variance 1, then scales and
/// shifts it by `weight` (ones) and `bias` (zeros) when `affine`.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t width, double eps = 1e-5, bool affine = true, DType dtype = DType::f32) : eps_(eps) {
    STRATA_CHECK(width > 0, "LayerNorm(", width, "): the width must be positive");
    if (affine) {
      weight_ = register_parameter("weight", ones({width}, dtype));
      bias_ = register_parameter("bias", zeros({width}, dtype));
    }
  }
  Tensor forward(const Tensor& x) override { return layer_norm(x, weight_, bias_, eps_); }

 private:
  Tensor weight_, bias_;
  double eps_;
};

/// Batch normalisation per channel of [N, C], [N, C, L] or [N, C, H, W]: in training mode the
/// batch's statistics normalise and the running statistics (buffers "running_mean",
/// "running_var", "num_batches_tracked") follow them with `momentum`; in evaluation mode the
/// running statistics normalise. `statistics` says whose rows a training step's statistics
/// span: the replica's (BatchStatistics::per_replica) or the global batch's
/// (BatchStatistics::global: SyncBatchNorm).
class BatchNorm : public Module {
 public:
  explicit BatchNorm(std::int64_t channels, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                     BatchStatistics statistics = BatchStatistics::per_replica, DType dtype = DType::f32)
      : eps_(eps), momentum_(momentum), statistics_(statistics) {
    STRATA_CHECK(channels > 0, "BatchNorm(", channels, "): channels must be positive");
    if (affine) {
      weight_ = register_parameter("weight", ones({channels}, dtype));
      bias_ = register_parameter("bias", zeros({channels}, dtype));
    }
    running_mean_ = register_buffer("running_mean", zeros({channels}, dtype));
    running_var_ = register_buffer("running_var", ones({channels}, dtype));
    batches_ = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) override { return forward_fused(x, Activation::none, {}); }
  /// BatchNorm then ReLU in one pass (a Sequential fuses "BatchNorm, ReLU" through it).
  bool fuses_activation() const override { return true; }
  Tensor forward_fused(const Tensor& x, Activation act) override { return forward_fused(x, act, {}); }
  /// act(forward(x) + residual) in one pass: a residual block's last norm, its shortcut and ReLU.
  Tensor forward_fused(const Tensor& x, Activation act, const Tensor& residual) {
    check_input(x);
    if (is_training()) count_batch();
    return batch_norm(x, weight_, bias_, running_mean_, running_var_, is_training(), momentum_, eps_, statistics_, act,
                      residual);
  }
  BatchStatistics statistics() const noexcept { return statistics_; }
  const Tensor& running_mean() const noexcept { return running_mean_; }
  const Tensor& running_var() const noexcept { return running_var_; }
  std::int64_t num_batches_tracked() const { return batches_.to(Device::cpu()).data<std::int64_t>()[0]; }

 protected:
  /// The input ranks this layer takes (BatchNorm1d: 2 or 3; BatchNorm2d: 4).
  virtual void check_input(const Tensor& x) const {
    STRATA_CHECK(x.defined() && x.ndim() >= 2, "BatchNorm needs x [N, C, ...], got ", x.shape());
  }

 private:
  /// num_batches_tracked + 1, where the buffer lives (a device's through a host copy).
  void count_batch() {
    if (batches_.device().kind == DeviceKind::cpu) {
      ++batches_.data<std::int64_t>()[0];
      return;
    }
    Tensor host = batches_.to(Device::cpu());
    ++host.data<std::int64_t>()[0];
    batches_.copy_(host);
  }

  Tensor weight_, bias_, running_mean_, running_var_, batches_;
  double eps_, momentum_;
  BatchStatistics statistics_;
};

/// BatchNorm over x [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  using BatchNorm::BatchNorm;

 protected:
  void check_input(const Tensor& x) const override {
    STRATA_CHECK(x.defined() && (x.ndim() == 2 || x.ndim() == 3), "BatchNorm1d needs x [N, C] or [N, C, L], got ",
                 x.shape());
  }
};

/// BatchNorm over x [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  using BatchNorm::BatchNorm;

 protected:
  void check_input(const Tensor& x) const override {
    STRATA_CHECK(x.defined() && x.ndim() == 4, "BatchNorm2d needs x [N, C, H, W], got ", x.shape());
  }
};

/// BatchNorm whose training statistics span the global batch: every replica in sync adds its
/// per-channel sums to the others' (one all-reduce of 2C + 1 numbers forward, 2C backward), so
/// N replicas normalise as one device does over the whole batch (torch.nn.SyncBatchNorm,
/// tf.keras.layers.BatchNormalization(synchronized=True)).
class SyncBatchNorm : public BatchNorm {
 public:
  explicit SyncBatchNorm(std::int64_t channels, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                         DType dtype = DType::f32)
      : BatchNorm(channels, eps, momentum, affine, BatchStatistics::global, dtype) {}
};

}  // namespace strata::nn

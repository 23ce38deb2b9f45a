/// \file
/// Differentiable normalisation: layer_norm over the last axis, and batch_norm over the
/// channels of [N, C] or [N, C, H, W] with running statistics, its batch statistics taken over
/// the replica's rows or over the global batch of the replicas in sync (SyncBatchNorm).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>     // NoGradGuard
#include <strata/autograd/tape.hpp>
#include <strata/kernels/cpu/batch_norm.hpp>
#include <strata/kernels/cpu/elementwise.hpp>  // copy_or_add
#include <strata/kernels/cpu/layer_norm.hpp>
#include <strata/ops/linalg.hpp>                 // Activation
#include <strata/ops/replica_statistics.hpp>     // sum_over_replicas, the deferred running statistics
#include <strata/support/replica_thread.hpp>      // replica_info: the replicas in sync
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Where batch_norm takes a training step's statistics from.
enum class BatchStatistics {
  per_replica,  ///< the replica's own rows (PyTorch DDP's BatchNorm)
  global,       ///< every row of the replicas in sync (SyncBatchNorm, tf's SyncBatchNormalization)
};

namespace ops::detail {

inline void layer_norm_backward(autograd::Node& n, std::uint64_t epoch) {
  auto sx = autograd::grad_slot(n.in[0], epoch), sw = autograd::grad_slot(n.in[1], epoch),
       sb = autograd::grad_slot(n.in[2], epoch);
  const Tensor &x = n.saved[0], &stats = n.saved[1];
  const std::int64_t cols = x.dim(-1), rows = x.numel() / cols;
  if (on_device(x)) {
    const Tensor& g = autograd::grad_output(n);
    const auto raw = [](const autograd::GradSlot& s) { return s ? s.dst.raw_data() : nullptr; };
    device_kernels("layer_norm", x, g).layer_norm_backward(
        x.device().index, x.dtype(), rows, cols, x.raw_data(), n.in[1].defined() ? n.in[1].raw_data() : nullptr,
        stats.raw_data(), g.raw_data(), raw(sx), sx.accumulate, raw(sw), sw.accumulate, raw(sb), sb.accumulate);
    return;
  }
  strata::detail::visit_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const auto ptr = [](const autograd::GradSlot& s) { return s ? s.dst.template data<T>() : nullptr; };
    kernels::cpu::layer_norm_backward<T>(rows, cols, x.template data<T>(),
                                         n.in[1].defined() ? n.in[1].template data<T>() : nullptr,
                                         stats.template data<T>(), autograd::grad_output(n).template data<T>(), ptr(sx),
                                         sx.accumulate, ptr(sw), sw.accumulate, ptr(sb), sb.accumulate);
  });
}

/// A reusable per-thread scratch of doubles (a step's statistics), so steps do not allocate.
inline std::span<double> scratch(std::size_t n) {
  thread_local std::vector<double> buf;
  if (buf.size() < n) buf.resize(n);
  std::fill(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
  return {buf.data(), n};
}

/// [N, C, ...]: images, channels and the plane (the product of the axes after C).
struct ChannelGeometry {
  std::int64_t images, channels, plane;
};
inline ChannelGeometry channel_geometry(const Tensor& x) {
  std::int64_t plane = 1;
  for (int i = 2; i < x.ndim(); ++i) plane *= x.dim(i);
  return {x.dim(0), x.dim(1), plane};
}

/// Adds the per-channel `sums` (doubles, on the host) to a [C] gradient on the host or a
/// device, in the CPU's arithmetic: d = (accumulate ? d : 0) + sum, rounded once.
inline void add_channel_sums(const autograd::GradSlot& s, std::span<const double> sums) {
  Tensor d = on_device(s.dst) ? (s.accumulate ? s.dst.to(Device::cpu()) : Tensor::empty(s.dst.shape(), s.dst.dtype()))
                              : s.dst;
  strata::detail::visit_floating(d.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    T* p = d.template data<T>();
    for (std::size_t c = 0; c < sums.size(); ++c) p[c] = static_cast<T>((s.accumulate ? p[c] : T(0)) + sums[c]);
  });
  if (on_device(s.dst)) Tensor(s.dst).copy_(d);
}

/// dst (+)= src, both contiguous and of one shape, on the host or a device.
inline void copy_or_add(const Tensor& src, const Tensor& dst, bool accumulate) {
  if (on_device(dst)) {
    const auto& dk = device_kernels("batch_norm", src, dst);
    if (accumulate)
      dk.binary(dst.device().index, dst.dtype(), kernels::math::BinaryKind::add, dst.numel(), dst.raw_data(),
                src.raw_data(), dst.raw_data());
    else
      backend_of(dst.device()).copy(dst.raw_data(), dst.device(), src.raw_data(), src.device(), dst.nbytes());
    return;
  }
  strata::detail::visit_floating(dst.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::copy_or_add<T>(dst.numel(), src.template data<T>(), dst.template data<T>(), accumulate);
  });
}

/// batch_norm's backward; n.in = {x, weight, bias, residual}, n.i = {training, statistics,
/// ReLU fused}. The output gradient is masked by the fused ReLU in place (this node owns it).
/// On a device the kernels run there and the per-channel sums come to the host, where the
/// replicas add them, as on the CPU.
inline void batch_norm_backward(autograd::Node& n, std::uint64_t epoch) {
  auto sx = autograd::grad_slot(n.in[0], epoch), sw = autograd::grad_slot(n.in[1], epoch),
       sb = autograd::grad_slot(n.in[2], epoch), sr = autograd::grad_slot(n.in[3], epoch);
  const Tensor &x = n.saved[0], &stats = n.saved[1];
  const ChannelGeometry geo = channel_geometry(x);
  const std::int64_t N = geo.images, C = geo.channels, P = geo.plane;  // (no structured binding: lambdas use them)
  const bool training = n.i[0] != 0;
  const auto which = static_cast<BatchStatistics>(n.i[1]);
  const Tensor& dy = autograd::grad_output(n);
  const bool dev = on_device(x);
  std::span<double> sums = scratch(static_cast<std::size_t>(2 * C));  // Σ dy, Σ dy h
  if (dev) {
    Tensor d_sums = Tensor::empty({2 * C}, DType::f64, x.device());
    device_kernels("batch_norm", x, dy, stats)
        .batch_norm_grad_sums(x.device().index, x.dtype(), N, C, P, x.raw_data(), stats.raw_data(),
                              static_cast<const char*>(stats.raw_data()) + C * static_cast<std::int64_t>(size_of(x.dtype())),
                              dy.raw_data(), n.i[2] != 0 ? n.out.raw_data() : nullptr,
                              static_cast<double*>(d_sums.raw_data()));
    const Tensor h = d_sums.to(Device::cpu());
    std::copy_n(h.template data<double>(), 2 * C, sums.begin());
  } else {
    strata::detail::visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
      using T = decltype(tag);
      const T* mean = stats.template data<T>();
      kernels::cpu::batch_norm_grad_sums<T>(N, C, P, x.template data<T>(), mean, mean + C, dy.template data<T>(),
                                            n.i[2] != 0 ? n.out.template data<T>() : nullptr, sums.data(),
                                            sums.data() + C);
    });
  }
  if (sr) copy_or_add(dy, sr.dst, sr.accumulate);
  if (sw) add_channel_sums(sw, sums.subspan(static_cast<std::size_t>(C)));
  if (sb) add_channel_sums(sb, sums.first(static_cast<std::size_t>(C)));
  // The replicas join the sum even when this one needs no input gradient: every one calls it.
  if (training && which == BatchStatistics::global) sum_over_replicas(sums);
  if (!sx) return;
  Tensor means;  // mean dy, mean dy h over the global count (training mode)
  if (training) {
    means = Tensor::empty({2, C}, x.dtype());
    strata::detail::visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
      using T = decltype(tag);
      T* md = means.template data<T>();
      for (std::int64_t c = 0; c < 2 * C; ++c)  // (no rows here, none anywhere: nothing to scale)
        md[c] = n.f[0] > 0 ? static_cast<T>(sums[static_cast<std::size_t>(c)] / n.f[0]) : T(0);
    });
    if (dev) means = means.to(x.device());
  }
  const Tensor& w = n.in[1];
  if (dev) {
    const std::int64_t es = static_cast<std::int64_t>(size_of(x.dtype()));
    const auto at = [&](const Tensor& t, std::int64_t k) -> const void* {
      return t.defined() ? static_cast<const char*>(t.raw_data()) + k * es : nullptr;
    };
    device_kernels("batch_norm", x, dy, sx.dst)
        .batch_norm_input_grad(x.device().index, x.dtype(), N, C, P, x.raw_data(), at(stats, 0), at(stats, C),
                               w.defined() ? w.raw_data() : nullptr, dy.raw_data(), at(means, 0), at(means, C),
                               sx.dst.raw_data(), sx.accumulate);
    return;
  }
  strata::detail::visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* mean = stats.template data<T>();
    const T* md = means.defined() ? means.template data<T>() : nullptr;
    kernels::cpu::batch_norm_input_grad<T>(N, C, P, x.template data<T>(), mean, mean + C,
                                           w.defined() ? w.template data<T>() : nullptr, dy.template data<T>(), md,
                                           md ? md + C : nullptr, sx.dst.template data<T>(), sx.accumulate);
  });
}

}  // namespace ops::detail

/// (x - mean) / sqrt(var + eps) * weight + bias over the last axis of x [..., D], the mean and
/// the (biased) variance per row; weight and bias ([D]) may be undefined.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5) {
  STRATA_CHECK(x.defined() && x.ndim() >= 1, "layer_norm of an undefined or 0-d tensor");
  const std::int64_t D = x.dim(-1);
  STRATA_CHECK(D > 0, "layer_norm over an empty last axis (shape ", x.shape(), ")");
  for (const Tensor* t : {&weight, &bias})
    STRATA_CHECK(!t->defined() || (t->ndim() == 1 && t->dim(0) == D && t->dtype() == x.dtype()), "layer_norm: ",
                 t == &weight ? "weight" : "bias", " must be [", D, "] of ", x.dtype(), ", got ", t->shape(), " of ",
                 t->dtype());
  STRATA_CHECK(eps > 0, "layer_norm: eps must be positive, got ", eps);
  const Tensor xc = x.contiguous();
  const std::int64_t rows = x.numel() / D;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor stats = Tensor::empty({rows, 2}, x.dtype(), x.device());
  if (on_device(x)) {
    const auto raw = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data() : nullptr; };
    device_kernels("layer_norm", x, weight, bias)
        .layer_norm_forward(x.device().index, x.dtype(), rows, D, xc.raw_data(), raw(weight), raw(bias), eps,
                            out.raw_data(), stats.raw_data());
  } else {
    require_host("layer_norm", weight, bias);
    strata::detail::visit_floating(x.dtype(), "layer_norm", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::layer_norm_forward<T>(rows, D, xc.template data<T>(),
                                          weight.defined() ? weight.template data<T>() : nullptr,
                                          bias.defined() ? bias.template data<T>() : nullptr, eps,
                                          out.template data<T>(), stats.template data<T>());
    });
  }
  if (auto* n = autograd::record("layer_norm", &ops::detail::layer_norm_backward, out, x, weight, bias))
    n->saved = {xc, stats};
  return out;
}

/// Batch normalisation of x [N, C] or [N, C, H, W] per channel. In training mode the batch's
/// statistics normalise: over the replica's rows (BatchStatistics::per_replica), or over the
/// global batch of the replicas in sync (BatchStatistics::global). The running statistics
/// move towards the global batch's in either mode, so every replica holds the same running
/// statistics, those one device would hold: running = (1 - momentum) running + momentum batch,
/// the variance unbiased (PyTorch's rule). Per replica, inside a strategy's step, the update
/// waits for the step's end (or the next evaluation-mode norm), where the replicas add every
/// norm's sums in one call (ops::detail::PendingRunningStatistics). In evaluation mode the
/// running statistics normalise. weight and bias ([C]) may be undefined.
///
/// `act` and `residual` fuse what follows a batch norm in a ResNet: the result is
/// act(batch_norm(x) + residual) (residual shaped like x, or undefined), one pass forward and
/// no extra pass backward, as cuDNN fuses them.
inline Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                         BatchStatistics which = BatchStatistics::per_replica, Activation act = Activation::none,
                         const Tensor& residual = {}) {
  STRATA_CHECK(x.defined() && x.ndim() >= 2, "batch_norm needs x [N, C] or [N, C, H, W], got ", x.shape());
  const bool dev = on_device(x);
  if (dev) {
    (void)device_kernels("batch_norm", x, weight, bias, running_mean, running_var);
    (void)device_kernels("batch_norm", x, residual);
  } else {
    require_host("batch_norm", weight, bias, running_mean, running_var);
    require_host("batch_norm", residual);
  }
  STRATA_CHECK(!residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype()),
               "batch_norm: the residual must be shaped like x (", x.shape(), " of ", x.dtype(), "), got ",
               residual.shape(), " of ", residual.dtype());
  const ops::detail::ChannelGeometry geo = ops::detail::channel_geometry(x);
  const std::int64_t N = geo.images, C = geo.channels, P = geo.plane;
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    STRATA_CHECK(!t->defined() || (t->ndim() == 1 && t->dim(0) == C && t->dtype() == x.dtype()),
                 "batch_norm: per-channel tensors must be [", C, "] of ", x.dtype(), ", got ", t->shape(), " of ",
                 t->dtype());
  STRATA_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm: running_mean and running_var must both be given or both left out");
  STRATA_CHECK(training || running_mean.defined(), "batch_norm in evaluation mode needs running statistics");
  STRATA_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "batch_norm: eps ", eps, " must be positive and momentum ",
               momentum, " in [0, 1]");
  const Tensor xc = x.contiguous();
  const Tensor rc = residual.defined() ? residual.contiguous() : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  // mean, 1/sqrt(var + eps) per channel, made on the host (and copied to the device).
  Tensor stats = Tensor::empty({2, C}, x.dtype());
  ops::detail::PendingRunningStatistics& pending = ops::detail::pending_running_statistics();
  // A per-replica norm's running statistics wait for the end of the step, where the replicas
  // sum every norm's statistics at once; an evaluation-mode norm reads them, so they settle first.
  const bool defer = training && which == BatchStatistics::per_replica && pending.deferring() &&
                     replica_info().replicas_in_sync > 1;
  if (!training) pending.settle();
  // The running statistics as evaluation mode reads them: themselves, or copies of a device's.
  const Tensor rm = dev && !training ? running_mean.to(Device::cpu()) : running_mean;
  const Tensor rv = dev && !training ? running_var.to(Device::cpu()) : running_var;
  double count = static_cast<double>(N * P);
  // Σx, Σx², count per channel: this replica's (local), then the global batch's (global).
  const auto width = static_cast<std::size_t>(2 * C + 1);
  std::span<double> sums = ops::detail::scratch(2 * width);
  std::span<double> local = sums.first(width), global = sums.subspan(width);
  if (training) {
    if (dev) {
      Tensor d_sums = Tensor::empty({2 * C}, DType::f64, x.device());
      device_kernels("batch_norm", x).channel_moments(x.device().index, x.dtype(), N, C, P, xc.raw_data(),
                                                      static_cast<double*>(d_sums.raw_data()));
      const Tensor h = d_sums.to(Device::cpu());
      std::copy_n(h.template data<double>(), 2 * C, local.begin());
    } else {
      strata::detail::visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::channel_moments<T>(N, C, P, xc.template data<T>(), local.data(), local.data() + C);
      });
    }
    local[width - 1] = count;
    std::copy(local.begin(), local.end(), global.begin());
    // The global batch's sums now: what SyncBatchNorm normalises by, or what the running
    // statistics follow when they cannot wait (no step to settle them at the end of).
    if (which == BatchStatistics::global || (running_mean.defined() && !defer)) ops::detail::sum_over_replicas(global);
    const std::span<const double> own = which == BatchStatistics::global ? global : local;
    count = own[width - 1];
    STRATA_CHECK(count > 1 || (which == BatchStatistics::per_replica && count == 0),
                 "batch_norm in training mode needs more than one value per channel, got ", count,
                 which == BatchStatistics::global ? " over the global batch" : " (x ", x.shape(), ")");
    if (running_mean.defined()) {
      if (defer)
        pending.add(running_mean, running_var, momentum, local);
      else
        ops::detail::update_running_statistics(running_mean, running_var, momentum, global);
    }
  }
  strata::detail::visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    T* mean = stats.template data<T>();
    T* rstd = mean + C;
    if (training) {
      const std::span<const double> own = which == BatchStatistics::global ? global : local;
      for (std::int64_t c = 0; c < C; ++c) {
        const double m = count > 0 ? own[static_cast<std::size_t>(c)] / count : 0.0;
        const double var = count > 0 ? std::max(0.0, own[static_cast<std::size_t>(C + c)] / count - m * m) : 0.0;
        mean[c] = static_cast<T>(m);
        rstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
      }
    } else {
      const T* rmp = rm.template data<T>();
      const T* rvp = rv.template data<T>();
      for (std::int64_t c = 0; c < C; ++c) {
        mean[c] = rmp[c];
        rstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(rvp[c]) + eps));
      }
    }
    if (dev) return;
    kernels::cpu::batch_norm_apply<T>(N, C, P, xc.template data<T>(), mean, rstd,
                                      weight.defined() ? weight.template data<T>() : nullptr,
                                      bias.defined() ? bias.template data<T>() : nullptr,
                                      rc.defined() ? rc.template data<T>() : nullptr, act == Activation::relu,
                                      out.template data<T>());
  });
  if (dev) {
    stats = stats.to(x.device());
    const auto raw = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data() : nullptr; };
    device_kernels("batch_norm", x)
        .batch_norm_apply(x.device().index, x.dtype(), N, C, P, xc.raw_data(), stats.raw_data(),
                          static_cast<const char*>(stats.raw_data()) + C * static_cast<std::int64_t>(size_of(x.dtype())),
                          raw(weight), raw(bias), raw(rc), act == Activation::relu, out.raw_data());
  }
  if (auto* n = autograd::record("batch_norm", &ops::detail::batch_norm_backward, out, x, weight, bias, residual)) {
    n->saved = {xc, stats};
    n->i[0] = training;
    n->i[1] = static_cast<std::int64_t>(which);
    n->i[2] = act == Activation::relu;
    n->f[0] = count;
    n->joins_replicas = training && which == BatchStatistics::global;  // its sums meet the others' even with no rows
  }
  return out;
}

}  // namespace strata

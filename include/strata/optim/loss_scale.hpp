/// \file
/// The dynamic loss scale of a float16 run (docs/mixed_precision.md), with GradScaler's
/// semantics: the loss is multiplied by the scale before backward (Optimizer::scale_loss), the
/// update protocol divides the aggregated gradients by it before anything reads them (the
/// non-finite policy, clipping, the rule), and a step whose gradients hold a NaN or Inf is
/// skipped and halves the scale, while `growth_interval` finite steps in a row double it.
/// The decision reads the aggregated gradients, the same bits on every replica of a
/// synchronous strategy, so every replica skips and rescales together without a collective of
/// its own. bfloat16 needs none (precision::needs_loss_scale).
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/autograd/backward.hpp>           // Gradients, NoGradGuard
#include <strata/optim/gradient_transforms.hpp>  // GradientTransforms::values, scale
#include <strata/optim/nonfinite.hpp>             // all_finite
#include <strata/support/check.hpp>

namespace strata::optim {

/// How the scale starts and moves (torch.cuda.amp.GradScaler's defaults).
struct LossScaleOptions {
  double initial = 65536.0;            ///< 2^16
  double growth_factor = 2.0;          ///< after `growth_interval` finite steps in a row
  double backoff_factor = 0.5;         ///< after a step with a non-finite gradient (which is skipped)
  std::int64_t growth_interval = 2000;
};

/// The scale and how many finite steps in a row it has seen since it last changed.
class LossScale {
 public:
  explicit LossScale(LossScaleOptions o = {}) : o_(o), scale_(o.initial) {
    STRATA_CHECK(std::isfinite(o.initial) && o.initial > 0, "loss scale: initial must be finite and positive, got ",
                 o.initial);
    STRATA_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, "loss scale: growth_factor must be finite "
                 "and greater than 1, got ", o.growth_factor);
    STRATA_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "loss scale: backoff_factor must lie in (0, 1), got ",
                 o.backoff_factor);
    STRATA_CHECK(o.growth_interval >= 1, "loss scale: growth_interval must be at least 1, got ", o.growth_interval);
  }

  double scale() const noexcept { return scale_; }
  std::int64_t clean_steps() const noexcept { return clean_; }
  const LossScaleOptions& options() const noexcept { return o_; }

  /// After a step's check: a non-finite step backs the scale off, `growth_interval` finite
  /// ones in a row grow it.
  void after_step(bool finite) noexcept {
    if (!finite) {
      scale_ *= o_.backoff_factor;
      clean_ = 0;
    } else if (++clean_ >= o_.growth_interval) {
      scale_ *= o_.growth_factor;
      clean_ = 0;
    }
  }

  /// Where a checkpoint left it; a value no run could reach is an error naming it.
  void restore(double scale, std::int64_t clean_steps) {
    STRATA_CHECK(std::isfinite(scale) && scale > 0, "loss scale: a saved scale of ", scale, " is not finite and positive");
    STRATA_CHECK(clean_steps >= 0 && clean_steps < o_.growth_interval, "loss scale: ", clean_steps,
                 " saved finite steps, outside [0, growth_interval = ", o_.growth_interval, ")");
    scale_ = scale;
    clean_ = clean_steps;
  }

 private:
  LossScaleOptions o_;
  double scale_;
  std::int64_t clean_ = 0;
};

/// t *= factor in place; whether every element of the result is finite (one pass over a
/// float32 gradient on the host, where the step spends it).
inline bool scale_and_check(Tensor& t, double factor) {
  if (t.device() == Device::cpu() && t.is_contiguous() && t.dtype() == DType::f32) {
    float* p = t.data<float>();
    const float f = static_cast<float>(factor);
    bool ok = true;
    for (std::int64_t k = 0, n = t.numel(); k < n; ++k) {  // vectorises
      p[k] *= f;
      ok &= std::isfinite(p[k]);
    }
    return ok;
  }
  GradientTransforms::scale(t, factor);
  return all_finite(t);
}

/// Divides every gradient of `g` by `scale` in place (their rows, for a row-sparse one);
/// whether all of them are finite afterwards. Every gradient is divided, whatever the answer,
/// so that the pass costs the same on every replica.
inline bool unscale(const Gradients& g, double scale) {
  NoGradGuard no_grad;
  const double inverse = 1.0 / scale;  // exact for the powers of two the defaults keep the scale at
  bool ok = true;
  for (std::size_t i = 0; i < g.size(); ++i) {
    Tensor t = GradientTransforms::values(g, i);
    if (t.defined()) ok &= scale_and_check(t, inverse);
  }
  return ok;
}

}  // namespace strata::optim

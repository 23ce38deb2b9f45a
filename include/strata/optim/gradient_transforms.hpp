/// \file
/// GradientTransforms: what an optimizer does to the aggregated gradients before its rule
/// (the update protocol's stage 2): a user's transform, clipping by value, then clipping by
/// the global norm. They run on the gradients every replica holds after aggregation (the
/// same bits everywhere), so N replicas clip exactly as one replica does. A row-sparse
/// gradient is transformed in its rows; a user's transform reads it dense (Gradients[i]).
#pragma once

#include <cmath>
#include <functional>
#include <utility>

#include <strata/autograd/backward.hpp>  // Gradients, NoGradGuard
#include <strata/kernels/cpu/vecdot.hpp>  // squared_norm, scale_inplace
#include <strata/ops/elementwise.hpp>
#include <strata/ops/reduce.hpp>
#include <strata/support/check.hpp>

namespace strata::optim {

struct GradientTransforms {
  double max_global_norm = 0;  ///< > 0: scale every gradient by max / norm where the norm of all of them exceeds it
  double max_value = 0;        ///< > 0: clamp every element to [-max_value, max_value]
  std::function<void(const Gradients&)> user;  ///< runs first; changes the gradients in place

  bool active() const noexcept { return max_global_norm > 0 || max_value > 0 || static_cast<bool>(user); }

  /// Gradient i's values: its rows where it is row-sparse (the other rows are zero, and stay
  /// zero under every transform here), else the dense gradient.
  static Tensor values(const Gradients& g, std::size_t i) {
    const RowGrad rows = g.rows(i);
    return rows.defined() ? rows.rows : g[i];
  }

  /// Whether `t` is float32 or float64 in host memory, laid out contiguously: the host passes
  /// below read and scale it in place, without temporaries.
  static bool on_host_plain(const Tensor& t) {
    return t.device() == Device::cpu() && t.is_contiguous() && (t.dtype() == DType::f32 || t.dtype() == DType::f64);
  }

  /// The norm of all of `g`'s gradients together: sqrt of the sum of every element's square.
  /// On the host each gradient's squares are summed in one read (kernels::cpu::squared_norm).
  /// On a device they are summed where they lie and added up there, and read once: reading
  /// each one would make the host wait for the device once per parameter (53 waits a step for
  /// the character Transformer on a GPU).
  static double global_norm(const Gradients& g) { return std::sqrt(sum_of_squares(g)); }
  /// The square of global_norm(g), summed as it is.
  static double sum_of_squares(const Gradients& g) {
    double sq = 0;
    Tensor unread;  // a device's running sum of squares, not read yet
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Tensor t = values(g, i);
      if (!t.defined()) continue;
      if (on_host_plain(t)) {
        strata::detail::visit_floating(t.dtype(), "global_norm", [&](auto tag) {
          using T = decltype(tag);
          sq += kernels::cpu::squared_norm<T>(t.numel(), t.template data<T>());
        });
        continue;
      }
      const Tensor s = sum(mul(t, t));
      if (s.device() == Device::cpu()) {
        sq += s.item();
      } else if (unread.defined() && unread.device() == s.device() && unread.dtype() == s.dtype()) {
        unread = add(unread, s);
      } else {
        if (unread.defined()) sq += unread.item();
        unread = s;
      }
    }
    if (unread.defined()) sq += unread.item();
    return sq;
  }

  /// t *= factor, in place (one pass on the host).
  static void scale(Tensor& t, double factor) {
    if (!on_host_plain(t)) {
      t.copy_(mul(t, factor));
      return;
    }
    strata::detail::visit_floating(t.dtype(), "clip_by_global_norm", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::scale_inplace<T>(t.numel(), static_cast<T>(factor), t.template data<T>());
    });
  }

  /// Applies the transforms to `g` in place (a sharded strategy's shares are made whole first).
  void apply(const Gradients& g) const {
    apply(g, [](double squares) { return squares; });
  }
  /// The same where `g` holds this rank's shards of the gradients (ShardedStrategy): the global
  /// norm's sum of squares is `over_shards(this rank's)`, the sum over every rank's.
  template <class OverShards>
  void apply(const Gradients& g, OverShards&& over_shards) const {
    if (!active()) return;
    NoGradGuard no_grad;
    g.make_whole();
    if (user) user(g);
    if (max_value > 0)
      for (std::size_t i = 0; i < g.size(); ++i) {
        Tensor t = values(g, i);
        if (t.defined()) t.copy_(add(sub(t, relu(add(t, -max_value))), relu(add(neg(t), -max_value))));
      }
    if (max_global_norm > 0) {
      const double norm = std::sqrt(over_shards(sum_of_squares(g)));
      if (norm > max_global_norm)  // tf.clip_by_global_norm: max / norm, no epsilon; a NaN norm passes through
        for (std::size_t i = 0; i < g.size(); ++i) {
          Tensor t = values(g, i);
          if (t.defined()) scale(t, max_global_norm / norm);
        }
    }
  }
};

}  // namespace strata::optim

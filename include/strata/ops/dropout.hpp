/// \file
/// Inverted dropout: in training, each element is zeroed with probability p and the rest are
/// scaled by 1/(1-p), the mask drawn from a Generator or named by a DropoutKey (counter-based,
/// what nn::Dropout uses); in evaluation it is the identity.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include <strata/autograd/tape.hpp>
#include <strata/kernels/math/philox.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path
#include <strata/tensor/factory.hpp>         // ones
#include <strata/tensor/random.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

/// Where a keyed dropout mask comes from. Element f of row r of the input (its index within
/// the row) is dropped or kept by word f % 4 of Philox4x32-10 of the counter
/// (f / 4, first_row + r) under a key derived from (seed, step): a pure function of those
/// numbers, so the rows of a batch draw the same mask however they are split between calls,
/// replicas or processes, and a resumed run draws what it would have drawn.
struct DropoutKey {
  std::uint64_t seed = 0;     ///< the layer's
  std::uint64_t step = 0;     ///< the step's (nn::Dropout: from the batch's epoch and index)
  std::int64_t first_row = 0; ///< the input's first row among the step's rows (Batch::global_offset)
};

namespace ops::detail {
inline void dropout_backward(autograd::Node& n, std::uint64_t epoch) {
  auto s = autograd::grad_slot(n.in[0], epoch);
  if (!s) return;
  if (on_device(n.out)) {  // d (+)= g * mask: the gradient of g * mask with respect to g
    const Tensor& g = autograd::grad_output(n);
    device_kernels("dropout", g, n.saved[0])
        .binary_backward(g.device().index, g.dtype(), kernels::math::BinaryKind::mul, 0, g.numel(), g.raw_data(),
                         nullptr, n.saved[0].raw_data(), s.dst.raw_data(), s.accumulate);
    return;
  }
  strata::detail::visit_floating(n.out.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* g = autograd::grad_output(n).template data<T>();
    const T* m = n.saved[0].template data<T>();
    T* d = s.dst.template data<T>();
    for (std::int64_t i = 0, cnt = n.out.numel(); i < cnt; ++i) d[i] = s.accumulate ? d[i] + g[i] * m[i] : g[i] * m[i];
  });
}

/// x * mask (the mask made on the host, in x's dtype), recorded with the mask for backward.
inline Tensor apply_dropout_mask(const Tensor& x, Tensor mask) {
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (on_device(x)) {  // one copy of the mask to the device: the device drops what the host would
    mask = mask.to(x.device());
    device_kernels("dropout", x).binary(x.device().index, x.dtype(), kernels::math::BinaryKind::mul, x.numel(),
                                        xc.raw_data(), mask.raw_data(), out.raw_data());
  } else {
    strata::detail::visit_floating(x.dtype(), "dropout", [&](auto tag) {
      using T = decltype(tag);
      const T* xp = xc.template data<T>();
      const T* m = mask.template data<T>();
      T* o = out.template data<T>();
      for (std::int64_t i = 0, cnt = x.numel(); i < cnt; ++i) o[i] = xp[i] * m[i];
    });
  }
  if (auto* n = autograd::record("dropout", &ops::detail::dropout_backward, out, x)) n->saved[0] = mask;
  return out;
}

/// The keyed mask of `rows` rows of `per_row` elements: 0 where dropped, `keep` elsewhere.
template <class T>
void keyed_dropout_mask(const DropoutKey& key, double p, std::int64_t rows, std::int64_t per_row, T keep, T* m) {
  const std::uint64_t k = Generator::derive(key.seed, key.step);
  const auto k0 = static_cast<std::uint32_t>(k), k1 = static_cast<std::uint32_t>(k >> 32);
  // Dropped when the word, uniform in [0, 2^32), is below p * 2^32.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p, 32));
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::uint64_t>(key.first_row + r);
    T* mr = m + r * per_row;
    for (std::int64_t f = 0; f < per_row; f += 4) {
      const auto group = static_cast<std::uint64_t>(f / 4);
      const kernels::math::Philox4x32 w = kernels::math::philox4x32_10(
          {{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32), static_cast<std::uint32_t>(row),
            static_cast<std::uint32_t>(row >> 32)}},
          k0, k1);
      const std::int64_t n = per_row - f < 4 ? per_row - f : 4;
      for (std::int64_t j = 0; j < n; ++j) mr[f + j] = w.v[j] < threshold ? T(0) : keep;
    }
  }
}

inline void check_dropout(const Tensor& x, double p) {
  STRATA_CHECK(x.defined(), "dropout of an undefined tensor");
  STRATA_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
}
}  // namespace ops::detail

/// Zeroes each element of `x` with probability `p` (drawn from `gen`) and scales survivors by
/// 1/(1-p); returns `x` itself when `training` is false or p == 0.
inline Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true) {
  ops::detail::check_dropout(x, p);
  if (!training || p == 0.0) return x;
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  strata::detail::visit_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    T* m = mask.template data<T>();
    for (std::int64_t i = 0, cnt = x.numel(); i < cnt; ++i) m[i] = gen.uniform() < p ? T(0) : keep;
  });
  return ops::detail::apply_dropout_mask(x, std::move(mask));
}

/// Inverted dropout with the mask `key` names (DropoutKey): each element of `x` [rows, ...]
/// is zeroed with probability `p` and the rest scaled by 1/(1-p); `x` itself when `training`
/// is false or p == 0.
inline Tensor dropout(const Tensor& x, double p, const DropoutKey& key, bool training = true) {
  ops::detail::check_dropout(x, p);
  if (!training || p == 0.0) return x;
  const std::int64_t rows = x.ndim() == 0 ? 1 : x.dim(0);
  const std::int64_t per_row = rows == 0 ? 0 : x.numel() / rows;
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  strata::detail::visit_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    ops::detail::keyed_dropout_mask<T>(key, p, rows, per_row, static_cast<T>(1.0 / (1.0 - p)), mask.template data<T>());
  });
  return ops::detail::apply_dropout_mask(x, std::move(mask));
}

}  // namespace strata

/// \file
/// Seeded parameter initialisers (PyTorch's formulas), and the process-wide default
/// Generator that layers draw from unless given one.
#pragma once

#include <cmath>
#include <cstdint>

#include <strata/tensor/factory.hpp>
#include <strata/tensor/random.hpp>

namespace strata {

/// The Generator layers use when none is passed. Not synchronised: create models on one thread.
inline Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
/// Reseeds the default generator, like torch.manual_seed.
inline void manual_seed(std::uint64_t seed) { default_generator().reseed(seed); }

namespace nn::init {

/// Fills `t` from U(-bound, bound).
inline void uniform_(Tensor& t, double bound, Generator& gen) {
  strata::detail::visit_floating(t.dtype(), "uniform_", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.template data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(gen.uniform(-bound, bound));
  });
}
/// Fills `t` from N(0, stddev^2).
inline void normal_(Tensor& t, double stddev, Generator& gen) {
  strata::detail::visit_floating(t.dtype(), "normal_", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.template data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(stddev * gen.normal());
  });
}

/// fan_in and fan_out of a weight shaped [out, in, k...].
inline std::pair<double, double> fans(const Shape& s) {
  STRATA_CHECK(s.ndim() >= 2, "fan computation needs a weight with at least 2 axes, got ", s);
  double receptive = 1;
  for (int i = 2; i < s.ndim(); ++i) receptive *= static_cast<double>(s[i]);
  return {static_cast<double>(s[1]) * receptive, static_cast<double>(s[0]) * receptive};
}

/// Kaiming (He) uniform with negative slope `a`: bound = gain * sqrt(3 / fan_in), gain =
/// sqrt(2 / (1 + a^2)). With a = sqrt(5) this is PyTorch's default for Linear and Conv2d.
inline void kaiming_uniform_(Tensor& t, Generator& gen, double a = 0.0) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  uniform_(t, gain * std::sqrt(3.0 / fans(t.shape()).first), gen);
}
inline void kaiming_normal_(Tensor& t, Generator& gen, double a = 0.0) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  normal_(t, gain / std::sqrt(fans(t.shape()).first), gen);
}
/// Xavier (Glorot) uniform: bound = gain * sqrt(6 / (fan_in + fan_out)).
inline void xavier_uniform_(Tensor& t, Generator& gen, double gain = 1.0) {
  const auto [fi, fo] = fans(t.shape());
  uniform_(t, gain * std::sqrt(6.0 / (fi + fo)), gen);
}
inline void xavier_normal_(Tensor& t, Generator& gen, double gain = 1.0) {
  const auto [fi, fo] = fans(t.shape());
  normal_(t, gain * std::sqrt(2.0 / (fi + fo)), gen);
}

}  // namespace nn::init
}  // namespace strata

/// \file
/// Sequential: children applied in order. A layer that can fuse an activation (Linear,
/// Conv2d) followed by ReLU runs as one fused operation, with no change to the model's
/// definition or its parameter names.
#pragma once

#include <concepts>
#include <memory>
#include <string>
#include <type_traits>

#include <strata/nn/layers.hpp>  // ReLU
#include <strata/nn/module.hpp>

namespace strata::nn {

/// Applies its children in order; parameters are named "<index>.<name>" as in PyTorch.
///
/// @code
/// strata::nn::Sequential mlp(strata::nn::Linear(784, 512), strata::nn::ReLU(), strata::nn::Linear(512, 10));
/// auto logits = mlp(x);   // Linear+ReLU runs fused
/// @endcode
class Sequential : public Module {
 public:
  Sequential() = default;
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && (std::derived_from<std::remove_cvref_t<Ms>, Module> && ...) &&
             (!std::is_same_v<std::remove_cvref_t<Ms>, Sequential> && ...))
  explicit Sequential(Ms&&... ms) {
    (add(std::forward<Ms>(ms)), ...);
  }

  /// Appends a module (moved in); returns a reference to the stored copy.
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  std::remove_cvref_t<M>& add(M&& m) {
    using T = std::remove_cvref_t<M>;
    auto p = std::make_unique<T>(std::forward<M>(m));
    T& ref = *p;
    register_module(std::to_string(children().size()), std::move(p));
    return ref;
  }

  std::size_t size() const noexcept { return children().size(); }

  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    const auto& cs = children();
    for (std::size_t i = 0; i < cs.size(); ++i) {
      Module& m = *cs[i].second;
      if (m.fuses_activation() && i + 1 < cs.size() && dynamic_cast<const ReLU*>(cs[i + 1].second.get())) {
        h = m.call_fused(h, Activation::relu);
        ++i;
      } else {
        h = m(h);
      }
    }
    return h;
  }
};

}  // namespace strata::nn

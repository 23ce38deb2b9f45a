/// \file
/// Stochastic gradient descent with momentum, dampening, Nesterov and weight decay
/// (torch.optim.SGD's update), fused into one pass per parameter; on a row-sparse table, by
/// rows (SparseUpdates).
#pragma once

#include <strata/kernels/cpu/optim_step.hpp>  // sgd_step
#include <strata/optim/optimizer.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path

namespace strata::optim {

struct SgdOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

/// @code
/// strata::optim::Sgd opt(model.parameters(), 0.05, {.momentum = 0.9});
/// opt.apply_gradients(strata::grad(loss, model.parameters()));
/// @endcode
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Tensor> params, double lr, SgdOptions o = {}) : Optimizer(std::move(params), lr), o_(o) {
    STRATA_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD momentum and weight decay must be non-negative");
    STRATA_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "Nesterov momentum needs momentum > 0 and no "
                 "dampening");
  }
  /// Shorthand for Sgd(params, lr, {.momentum = momentum}).
  Sgd(std::vector<Tensor> params, double lr, double momentum) : Sgd(std::move(params), lr, SgdOptions{momentum}) {}

  std::vector<std::pair<std::string, Tensor>> state() const override {
    return detail::named_slots("momentum_buffer", bufs_);
  }
  const SgdOptions& options() const noexcept { return o_; }
  std::unique_ptr<Optimizer> clone_for(std::vector<Tensor> params) const override {
    return std::make_unique<Sgd>(std::move(params), lr(), o_);
  }
  bool updates_ranges() const noexcept override { return true; }

 protected:
  std::vector<Tensor>* slots_named(const std::string& prefix) override {
    return prefix == "momentum_buffer" ? &bufs_ : nullptr;
  }
  void update(std::size_t i, Tensor& p, const Tensor& g) override {
    if (!on_device(p)) return update_range(i, p, g, {0, p.numel()});
    Tensor buf;
    const kernels::cpu::SgdParams kp = params_for(i, buf);
    device_kernels("SGD", p, g, buf).sgd_step(p.device().index, p.dtype(), p.numel(), p.raw_data(), g.raw_data(),
                                              buf.defined() ? buf.raw_data() : nullptr, kp);
  }
  void prepare_state(std::size_t i) override {
    if (o_.momentum != 0) (void)state_for(bufs_, i);
  }
  void update_rows(std::size_t i, Tensor& p, const RowGrad& g, ElementRange r) override {
    Tensor buf;
    const kernels::cpu::SgdParams kp = params_for(i, buf);
    const std::int64_t width = p.dim(0) > 0 ? p.numel() / p.dim(0) : 0;
    strata::detail::visit_floating(p.dtype(), "SGD", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::sgd_rows<T>(g.size(), width, g.indices.template data<std::int64_t>(), g.rows.template data<T>(),
                                p.template data<T>(), buf.defined() ? buf.template data<T>() : nullptr, kp, r.begin,
                                r.end);
    });
  }
  void update_range(std::size_t i, Tensor& p, const Tensor& g, ElementRange r) override {
    STRATA_CHECK(!on_device(p), "SGD: a range update runs on host memory, parameter ", i, " is on ", p.device());
    Tensor buf;
    const kernels::cpu::SgdParams kp = params_for(i, buf);
    strata::detail::visit_floating(p.dtype(), "SGD", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::sgd_step<T>(r.end - r.begin, p.template data<T>() + r.begin, g.template data<T>() + r.begin,
                                buf.defined() ? buf.template data<T>() + r.begin : nullptr, kp);
    });
  }

 private:
  // This step's settings for parameter i; `buf` becomes its momentum buffer (if any).
  kernels::cpu::SgdParams params_for(std::size_t i, Tensor& buf) {
    kernels::cpu::SgdParams kp{lr(), o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, false};
    if (o_.momentum != 0) {
      kp.first_step = bufs_.size() != params().size() || !bufs_[i].defined();
      buf = state_for(bufs_, i);
    }
    return kp;
  }

  SgdOptions o_;
  std::vector<Tensor> bufs_;
};

}  // namespace strata::optim

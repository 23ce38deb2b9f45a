/// \file
/// Adam and AdamW (torch.optim.Adam / AdamW updates), fused into one pass per parameter; on a
/// row-sparse table, by rows (SparseUpdates::lazy: torch.optim.SparseAdam's rule, with the
/// bias correction of the optimizer's step count, and weight decay on the rows updated).
#pragma once

#include <strata/kernels/cpu/optim_step.hpp>  // adam_step
#include <strata/optim/optimizer.hpp>
#include <strata/tensor/device_kernels.hpp>  // the device path

namespace strata::optim {

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};

/// Adam; weight decay is added to the gradient (L2), as in torch.optim.Adam.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions o = {}) : Adam(std::move(params), lr, o, false) {}

  std::vector<std::pair<std::string, Tensor>> state() const override {
    auto out = detail::named_slots("exp_avg", m_);
    for (auto& e : detail::named_slots("exp_avg_sq", v_)) out.push_back(std::move(e));
    return out;
  }
  std::unique_ptr<Optimizer> clone_for(std::vector<Tensor> params) const override {
    return std::unique_ptr<Optimizer>(new Adam(std::move(params), lr(), o_, decoupled_));
  }
  bool updates_ranges() const noexcept override { return true; }

 protected:
  Adam(std::vector<Tensor> params, double lr, AdamOptions o, bool decoupled)
      : Optimizer(std::move(params), lr), o_(o), decoupled_(decoupled) {
    STRATA_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam betas must be in [0, 1)");
    STRATA_CHECK(o.eps >= 0 && o.weight_decay >= 0, "Adam eps and weight decay must be non-negative");
  }
  std::vector<Tensor>* slots_named(const std::string& prefix) override {
    return prefix == "exp_avg" ? &m_ : prefix == "exp_avg_sq" ? &v_ : nullptr;
  }
  void update(std::size_t i, Tensor& p, const Tensor& g) override {
    if (!on_device(p)) return update_range(i, p, g, {0, p.numel()});
    Tensor m = state_for(m_, i), v = state_for(v_, i);
    device_kernels("Adam", p, g, m, v).adam_step(p.device().index, p.dtype(), p.numel(), p.raw_data(), g.raw_data(),
                                                 m.raw_data(), v.raw_data(), step_params());
  }
  void prepare_state(std::size_t i) override {
    (void)state_for(m_, i);
    (void)state_for(v_, i);
  }
  void update_rows(std::size_t i, Tensor& p, const RowGrad& g, ElementRange r) override {
    Tensor m = state_for(m_, i), v = state_for(v_, i);
    const kernels::cpu::AdamParams kp = step_params();
    const std::int64_t width = p.dim(0) > 0 ? p.numel() / p.dim(0) : 0;
    strata::detail::visit_floating(p.dtype(), "Adam", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::adam_rows<T>(g.size(), width, g.indices.template data<std::int64_t>(), g.rows.template data<T>(),
                                 p.template data<T>(), m.template data<T>(), v.template data<T>(), kp, r.begin,
                                 r.end);
    });
  }
  void update_range(std::size_t i, Tensor& p, const Tensor& g, ElementRange r) override {
    STRATA_CHECK(!on_device(p), "Adam: a range update runs on host memory, parameter ", i, " is on ", p.device());
    Tensor m = state_for(m_, i), v = state_for(v_, i);
    const kernels::cpu::AdamParams kp = step_params();
    strata::detail::visit_floating(p.dtype(), "Adam", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::adam_step<T>(r.end - r.begin, p.template data<T>() + r.begin, g.template data<T>() + r.begin,
                                 m.template data<T>() + r.begin, v.template data<T>() + r.begin, kp);
    });
  }

 private:
  kernels::cpu::AdamParams step_params() const {
    return {lr(), o_.beta1, o_.beta2, o_.eps, o_.weight_decay, decoupled_, steps() + 1};
  }

  AdamOptions o_;
  bool decoupled_;
  std::vector<Tensor> m_, v_;
};

/// AdamW: decoupled weight decay (p *= 1 - lr * wd before the Adam update); wd defaults to 0.01.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, AdamOptions o = {.weight_decay = 0.01})
      : Adam(std::move(params), lr, o, true) {}
};

}  // namespace strata::optim

/// \file
/// Module: the base of every layer. It owns named parameters and child modules, lists them
/// in registration order (PyTorch's naming: "0.weight", "fc.bias"), and switches between
/// training and evaluation.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/ops/linalg.hpp>  // Activation
#include <strata/tensor/placement.hpp>  // move_in_place
#include <strata/tensor/random.hpp>     // Generator
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

/// A layer or a composition of layers.
class Module {
 public:
  Module() = default;
  // A call hook goes with the module and is told where it went (CallHook::moved).
  Module(Module&& o) noexcept
      : params_(std::move(o.params_)), buffers_(std::move(o.buffers_)), children_(std::move(o.children_)),
        params_cache_(std::move(o.params_cache_)), params_valid_(o.params_valid_), training_(o.training_),
        hook_(std::exchange(o.hook_, nullptr)) {
    if (hook_) hook_->moved(this);
  }
  Module& operator=(Module&& o) noexcept {
    if (this == &o) return *this;
    if (hook_) hook_->moved(nullptr);  // (the module it was set on is replaced)
    params_ = std::move(o.params_);
    buffers_ = std::move(o.buffers_);
    children_ = std::move(o.children_);
    params_cache_ = std::move(o.params_cache_);
    params_valid_ = o.params_valid_;
    training_ = o.training_;
    hook_ = std::exchange(o.hook_, nullptr);
    if (hook_) hook_->moved(this);
    return *this;
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() {
    if (hook_) hook_->moved(nullptr);
  }

  virtual Tensor forward(const Tensor& x) = 0;
  /// forward(x), with this module's call hook around it where one is set: a module that
  /// calls its children through operator() lets a strategy act around each child's call
  /// (ShardedStrategy's wrap units gather their parameters there); forward() skips the hook.
  Tensor operator()(const Tensor& x) {
    return hook_ ? hooked([&] { return forward(x); }) : forward(x);
  }
  /// forward_fused(x, act) through the call hook, as operator() calls forward.
  Tensor call_fused(const Tensor& x, Activation act) {
    return hook_ ? hooked([&] { return forward_fused(x, act); }) : forward_fused(x, act);
  }
  /// `f()`, a call of this module's own forward of another form (BatchNorm's with a
  /// shortcut), through the call hook.
  template <class F>
  Tensor call(F&& f) {
    return hook_ ? hooked(f) : f();
  }

  /// What runs around a module's call (set_call_hook): before() as it begins, after() on its
  /// output, whose return value the call returns instead.
  class CallHook {
   public:
    virtual ~CallHook() = default;
    virtual void before(Module& m) = 0;
    virtual Tensor after(Module& m, Tensor out) = 0;
    /// The module it is set on moved to `to`, or is gone (null): a hook that keeps the
    /// module's address follows it, and never reaches a module that has ended.
    virtual void moved(Module* to) noexcept { (void)to; }
  };
  /// Runs `hook` around every call of this module through operator() or call_fused (null:
  /// none). The hook is not owned: it must outlive the module's calls.
  void set_call_hook(CallHook* hook) noexcept { hook_ = hook; }
  CallHook* call_hook() const noexcept { return hook_; }

  /// (name, module) for each child, in registration order.
  std::vector<std::pair<std::string, Module*>> named_children() {
    std::vector<std::pair<std::string, Module*>> out;
    for (auto& [cname, child] : children_) out.emplace_back(cname, child.get());
    return out;
  }
  /// (name, module) for every descendant, depth first in registration order, named as
  /// named_parameters() prefixes their parameters ("h.0", "h.0.attn").
  std::vector<std::pair<std::string, Module*>> named_modules() {
    std::vector<std::pair<std::string, Module*>> out;
    for (auto& [cname, child] : children_) {
      out.emplace_back(cname, child.get());
      for (auto& [sub, m] : child->named_modules()) out.emplace_back(cname + "." + sub, m);
    }
    return out;
  }

  /// True if forward_fused() can apply an activation in its own output pass.
  virtual bool fuses_activation() const { return false; }
  /// forward() followed by `act`, fused where the layer supports it.
  virtual Tensor forward_fused(const Tensor& x, Activation act);

  /// Every parameter of this module and its children, in registration order. The list is
  /// built once and reused, so calling this in the training step does not allocate.
  const std::vector<Tensor>& parameters() const {
    if (!params_valid_) {
      params_cache_.clear();
      for (auto& [name, t] : named_parameters()) params_cache_.push_back(t);
      params_valid_ = true;
    }
    return params_cache_;
  }
  /// (name, parameter) pairs; a child's names are prefixed with the child's name and a dot.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const {
    std::vector<std::pair<std::string, Tensor>> out = params_;
    for (const auto& [cname, child] : children_)
      for (auto& [pname, t] : child->named_parameters()) out.emplace_back(cname + "." + pname, t);
    return out;
  }
  /// (name, buffer) pairs: state that gradients do not train (BatchNorm's running statistics),
  /// named like parameters; checkpoints and weights files save them beside the parameters.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const {
    std::vector<std::pair<std::string, Tensor>> out = buffers_;
    for (const auto& [cname, child] : children_)
      for (auto& [bname, t] : child->named_buffers()) out.emplace_back(cname + "." + bname, t);
    return out;
  }
  /// Every buffer, in the order of named_buffers().
  std::vector<Tensor> buffers() const {
    std::vector<Tensor> out;
    for (auto& [name, t] : named_buffers()) out.push_back(t);
    return out;
  }

  /// The random generators this module and its children own (Dropout's), in a fixed order:
  /// checkpoints save and restore them, so a resumed run draws the masks it would have drawn.
  std::vector<Generator*> generators() {
    std::vector<Generator*> out;
    own_generators(out);
    for (auto& [name, child] : children_) {
      auto more = child->generators();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }

  /// Training mode (dropout active) or evaluation mode; applies to every child.
  void train(bool on = true) {
    training_ = on;
    for (auto& [name, child] : children_) child->train(on);
  }
  void eval() { train(false); }
  bool is_training() const noexcept { return training_; }

  /// Moves every parameter to `device` in place: each parameter handle the caller (or an
  /// optimizer) holds now names the moved values, like PyTorch's Module.to(device). Gradients
  /// are dropped (the next backward makes them on the new device).
  Module& to(Device device) {
    move_in_place(parameters(), device);
    move_in_place(buffers(), device);
    return *this;
  }

 protected:
  /// Appends the generators this module itself owns (not its children's).
  virtual void own_generators(std::vector<Generator*>& out) { (void)out; }
  /// Adds `t` as a parameter named `name`; it is marked as requiring gradients.
  Tensor register_parameter(std::string name, Tensor t) {
    t.requires_grad_(true);
    params_.emplace_back(std::move(name), t);
    params_valid_ = false;
    return t;
  }
  /// Adds `t` as a buffer named `name` (no gradient; the layer updates it itself).
  Tensor register_buffer(std::string name, Tensor t) {
    buffers_.emplace_back(std::move(name), t);
    return t;
  }
  /// Adds an owned child module.
  Module& register_module(std::string name, std::unique_ptr<Module> m) {
    children_.emplace_back(std::move(name), std::move(m));
    params_valid_ = false;
    return *children_.back().second;
  }
  /// Makes a child of type M from `args`, registers it as `name` and returns it (owned by the
  /// children list: the reference stays valid while this module lives, also after a move).
  template <class M, class... A>
  M& make_module(std::string name, A&&... args) {
    return static_cast<M&>(register_module(std::move(name), std::make_unique<M>(std::forward<A>(args)...)));
  }
  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  template <class F>
  Tensor hooked(F&& call) {
    CallHook* h = hook_;
    h->before(*this);
    return h->after(*this, call());
  }

  mutable std::vector<Tensor> params_cache_;
  mutable bool params_valid_ = false;
  bool training_ = true;
  CallHook* hook_ = nullptr;
};

}  // namespace strata::nn

#include <strata/ops/elementwise.hpp>  // relu

namespace strata::nn {
inline Tensor Module::forward_fused(const Tensor& x, Activation act) {
  Tensor y = forward(x);
  return act == Activation::relu ? relu(y) : y;
}
}  // namespace strata::nn

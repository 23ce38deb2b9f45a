/// \file
/// The precision policy (docs/mixed_precision.md): the type a step's products compute in. A
/// Scope sets it for the calling thread, as torch.autocast does; the strategies run their
/// replicas under their caller's policy. float32 unless a Scope says otherwise. A float16 run
/// also needs a loss scale on its optimizer (optim/loss_scale.hpp; needs_loss_scale).
#pragma once

#include <string>
#include <string_view>

#include <strata/support/check.hpp>
#include <strata/tensor/dtype.hpp>

namespace strata::precision {

/// What a step computes in. Under bfloat16 (float16) the products of float32 tensors on the
/// host (linear layers, matmul, convolutions by im2col) round their operands to bfloat16
/// (float16) and sum in float32; the variables, their gradients, the activations and every
/// statistic stay float32.
struct Policy {
  DType compute = DType::f32;  ///< float32, bfloat16 or float16

  friend bool operator==(const Policy&, const Policy&) = default;
};

inline constexpr Policy float32{DType::f32};
inline constexpr Policy bfloat16{DType::bf16};
inline constexpr Policy float16{DType::f16};

/// The policy's name as the trainers' --precision takes it: "fp32", "bf16" or "fp16".
inline const char* name_of(const Policy& p) noexcept {
  return p.compute == DType::bf16 ? "bf16" : p.compute == DType::f16 ? "fp16" : "fp32";
}

/// The policy a name stands for: fp32 (float32), bf16 (bfloat16) or fp16 (float16).
inline Policy from_name(std::string_view name) {
  if (name == "fp32" || name == "float32") return float32;
  if (name == "bf16" || name == "bfloat16") return bfloat16;
  if (name == "fp16" || name == "float16") return float16;
  STRATA_THROW(invalid_argument, "strata.precision", "precision '", std::string(name),
               "' is none of fp32 (float32), bf16 (bfloat16), fp16 (float16)");
}

/// Whether a run under `p` needs a loss scale: float16's range ends at 65504 and its normals
/// at 6.1e-5, so small gradients vanish in its products unless the loss is scaled up
/// (Optimizer::set_loss_scale); bfloat16 has float32's exponent range and needs none.
inline bool needs_loss_scale(const Policy& p) noexcept { return p.compute == DType::f16; }

namespace detail {
inline Policy& current_slot() noexcept {
  thread_local Policy policy;
  return policy;
}
}  // namespace detail

/// The calling thread's policy.
inline const Policy& current() noexcept { return detail::current_slot(); }

/// Sets the calling thread's policy for the scope's lifetime and puts the previous one back;
/// scopes nest.
class Scope {
 public:
  explicit Scope(Policy p) : saved_(detail::current_slot()) {
    STRATA_CHECK(p.compute == DType::f32 || p.compute == DType::bf16 || p.compute == DType::f16,
                 "precision::Scope: compute type ", strata::name_of(p.compute), " is none of float32, bfloat16, float16");
    detail::current_slot() = p;
  }
  ~Scope() { detail::current_slot() = saved_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Policy saved_;
};

}  // namespace strata::precision

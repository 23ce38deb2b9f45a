/// \file
/// MultiheadAttention: queries, keys and values projected by one fused input projection,
/// split into heads, attended (optionally causally), merged and projected out. Parameter
/// names are torch.nn.MultiheadAttention's ("in_proj_weight", "in_proj_bias",
/// "out_proj.weight", "out_proj.bias"); inputs are batch-first [B, T, width].
#pragma once

#include <cstdint>

#include <strata/nn/init.hpp>    // xavier_uniform_
#include <strata/nn/layers.hpp>  // Linear
#include <strata/nn/module.hpp>
#include <strata/ops/attention.hpp>
#include <strata/ops/concat.hpp>     // slice
#include <strata/ops/linalg.hpp>     // linear
#include <strata/ops/shape_ops.hpp>  // reshape, permute
#include <strata/tensor/factory.hpp>

namespace strata::nn {

class MultiheadAttention : public Module {
 public:
  /// `width` split over `heads` heads (width % heads == 0). Initialised as PyTorch does: the
  /// input projection Xavier-uniform, the biases zero.
  MultiheadAttention(std::int64_t width, std::int64_t heads, bool causal = false, bool bias = true,
                     Generator& gen = default_generator(), DType dtype = DType::f32)
      : width_(width), heads_(heads), causal_(causal) {
    STRATA_CHECK(width > 0 && heads > 0 && width % heads == 0, "MultiheadAttention(", width, ", ", heads,
                 "): the width must be a positive multiple of the heads");
    Tensor w = Tensor::empty({3 * width, width}, dtype);
    init::xavier_uniform_(w, gen);
    in_w_ = register_parameter("in_proj_weight", w);
    if (bias) in_b_ = register_parameter("in_proj_bias", zeros({3 * width}, dtype));
    out_ = &make_module<Linear>("out_proj", width, width, bias, gen, dtype);
    if (bias) {
      Tensor ob = out_->bias();
      ob.fill_(0.0);
    }
  }

  /// Self-attention of x [B, T, width].
  Tensor forward(const Tensor& x) override {
    check(x, "x");
    const Tensor qkv = linear(x, in_w_, in_b_);  // [B, T, 3 width]
    // On the host, one operation reads the heads in place and writes them merged.
    if (!on_device(qkv)) return (*out_)(ops::detail::self_attention(qkv, heads_, causal_));
    // On a device: [B, 3 heads, T, D], a view; q, k and v are its thirds along axis 1, strided
    // views, which each matmul copies contiguous once to run its batch as one GEMM call.
    const std::int64_t H = heads_;
    const Tensor all = permute(reshape(qkv, {x.dim(0), x.dim(1), 3 * H, width_ / H}), {0, 2, 1, 3});
    return attend_heads(ops::detail::slice_node(all, 1, 0, H, false), ops::detail::slice_node(all, 1, H, 2 * H, false),
                        ops::detail::slice_node(all, 1, 2 * H, 3 * H, false), x.dim(1));
  }
  /// Attention of query [B, Tq, width] over key and value [B, Tk, width].
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value) {
    check(query, "query");
    check(key, "key");
    check(value, "value");
    const auto rows = [&](std::int64_t k) { return slice(in_w_, 0, k * width_, (k + 1) * width_); };
    const auto bias = [&](std::int64_t k) { return in_b_.defined() ? slice(in_b_, 0, k * width_, (k + 1) * width_) : Tensor(); };
    return attend(linear(query, rows(0), bias(0)), linear(key, rows(1), bias(1)), linear(value, rows(2), bias(2)));
  }
  bool causal() const noexcept { return causal_; }

 private:
  void check(const Tensor& t, const char* what) const {
    STRATA_CHECK(t.defined() && t.ndim() == 3 && t.dim(2) == width_, "MultiheadAttention: ", what, " must be [B, T, ",
                 width_, "], got ", t.shape());
  }
  /// [B, T, width] -> [B, heads, T, width / heads], a view.
  Tensor heads(const Tensor& t) const {
    return permute(reshape(t, {t.dim(0), t.dim(1), heads_, width_ / heads_}), {0, 2, 1, 3});
  }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) { return attend_heads(heads(q), heads(k), heads(v), q.dim(1)); }
  /// Attention of q [B, H, Tq, D] over k and v [B, H, Tk, D], heads merged, projected.
  Tensor attend_heads(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t tq) {
    const Tensor o = scaled_dot_product_attention(q, k, v, causal_);  // [B, H, Tq, D]
    const Tensor merged = reshape(permute(o, {0, 2, 1, 3}), {q.dim(0), tq, width_});
    return (*out_)(merged);
  }

  std::int64_t width_, heads_;
  bool causal_;
  Tensor in_w_, in_b_;
  Linear* out_ = nullptr;
};

}  // namespace strata::nn

/// \file
/// The reference character-level language model: a causal Transformer of nanoGPT's
/// shakespeare-char shape (pre-norm blocks of causal multi-head attention and a GELU MLP,
/// learned position embeddings, a final LayerNorm and a linear head), and the same shapes as
/// bench/pytorch_transformer.py builds in PyTorch.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <strata/nn/attention.hpp>      // MultiheadAttention
#include <strata/nn/embedding.hpp>
#include <strata/nn/init.hpp>
#include <strata/nn/layers.hpp>         // Linear, GELU
#include <strata/nn/normalization.hpp>  // LayerNorm
#include <strata/nn/sequential.hpp>
#include <strata/tensor/factory.hpp>

namespace strata::models {

struct TransformerShape {
  std::int64_t vocab = 96;    ///< distinct tokens
  std::int64_t context = 64;  ///< the longest sequence (position embeddings)
  std::int64_t width = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
};

/// x + attn(ln_1(x)), then x + mlp(ln_2(x)) with mlp = Linear(w, 4w) → GELU → Linear(4w, w).
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(const TransformerShape& s, Generator& gen) {
    ln1_ = &make_module<nn::LayerNorm>("ln_1", s.width);
    attn_ = &make_module<nn::MultiheadAttention>("attn", s.width, s.heads, /*causal=*/true, true, gen);
    ln2_ = &make_module<nn::LayerNorm>("ln_2", s.width);
    mlp_ = &make_module<nn::Sequential>("mlp", nn::Linear(s.width, 4 * s.width, true, gen), nn::GELU(),
                               nn::Linear(4 * s.width, s.width, true, gen));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = x + (*attn_)((*ln1_)(x));
    return h + (*mlp_)((*ln2_)(h));
  }

 private:
  nn::LayerNorm* ln1_ = nullptr;
  nn::LayerNorm* ln2_ = nullptr;
  nn::MultiheadAttention* attn_ = nullptr;
  nn::Sequential* mlp_ = nullptr;
};

/// tokens [B, T] (int64, T <= context) -> logits [B, T, vocab]. Every weight matrix and
/// embedding starts from N(0, 0.02) and every bias from 0 (GPT-2's scheme, as nanoGPT), the
/// residual output projections from N(0, 0.02 / sqrt(2 layers)).
class CharTransformer : public nn::Module {
 public:
  explicit CharTransformer(const TransformerShape& s, Generator& gen = default_generator()) : shape_(s) {
    STRATA_CHECK(s.vocab > 0 && s.context > 0 && s.layers > 0, "CharTransformer: vocabulary ", s.vocab, ", context ",
                 s.context, " and layers ", s.layers, " must be positive");
    tokens_ = &make_module<nn::Embedding>("wte", s.vocab, s.width, gen);
    positions_ = &make_module<nn::Embedding>("wpe", s.context, s.width, gen);
    for (std::int64_t i = 0; i < s.layers; ++i)
      blocks_.push_back(&make_module<TransformerBlock>("h." + std::to_string(i), s, gen));
    ln_f_ = &make_module<nn::LayerNorm>("ln_f", s.width);
    head_ = &make_module<nn::Linear>("lm_head", s.width, s.vocab, false, gen);
    for (auto& [name, p] : named_parameters()) {
      Tensor t = p;
      if (p.ndim() == 1) continue;  // biases stay 0, LayerNorm weights 1
      const bool residual = name.ends_with("out_proj.weight") || name.ends_with("mlp.2.weight");
      nn::init::normal_(t, residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(s.layers)) : 0.02, gen);
    }
    for (auto& [name, p] : named_parameters())
      if (p.ndim() == 1 && name.ends_with("bias")) {
        Tensor t = p;
        t.fill_(0.0);
      }
  }

  Tensor forward(const Tensor& tokens) override {
    STRATA_CHECK(tokens.defined() && tokens.ndim() == 2 && tokens.dim(1) <= shape_.context,
                 "CharTransformer: tokens must be [B, T] with T <= ", shape_.context, ", got ", tokens.shape());
    const std::int64_t T = tokens.dim(1);
    if (!positions_of_.defined() || positions_of_.dim(0) != T) {
      positions_of_ = Tensor::empty({T}, DType::i64);
      for (std::int64_t t = 0; t < T; ++t) positions_of_.data<std::int64_t>()[t] = t;
    }
    Tensor x = (*tokens_)(tokens) + (*positions_)(positions_of_);  // [B, T, W] + [T, W]
    for (TransformerBlock* b : blocks_) x = (*b)(x);
    return (*head_)((*ln_f_)(x));
  }
  const TransformerShape& shape() const noexcept { return shape_; }

 private:
  TransformerShape shape_;
  nn::Embedding* tokens_ = nullptr;
  nn::Embedding* positions_ = nullptr;
  std::vector<TransformerBlock*> blocks_;
  nn::LayerNorm* ln_f_ = nullptr;
  nn::Linear* head_ = nullptr;
  Tensor positions_of_;  // 0 .. T-1, kept between steps
};

}  // namespace strata::models

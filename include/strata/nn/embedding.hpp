/// \file
/// Embedding: a table of `rows` vectors of `width`, looked up by integer indices.
#pragma once

#include <cstdint>

#include <strata/nn/init.hpp>  // default_generator, normal_
#include <strata/nn/module.hpp>
#include <strata/ops/embedding.hpp>

namespace strata::nn {

/// indices [...] (int32 or int64) -> [..., width]. The table ("weight", [rows, width]) is
/// initialised from N(0, 1), like torch.nn.Embedding; its gradient is dense, or the rows
/// looked up with TableGradient::row_sparse (torch.nn.Embedding(sparse=True);
/// docs/design/sparse_tables.md).
class Embedding : public Module {
 public:
  Embedding(std::int64_t rows, std::int64_t width, Generator& gen = default_generator(), DType dtype = DType::f32,
            TableGradient grad = TableGradient::dense)
      : grad_(grad) {
    STRATA_CHECK(rows > 0 && width > 0, "Embedding(", rows, ", ", width, "): sizes must be positive");
    Tensor w = Tensor::empty({rows, width}, dtype);
    init::normal_(w, 1.0, gen);
    weight_ = register_parameter("weight", w);
    if (grad == TableGradient::row_sparse) weight_.impl()->ag.row_sparse = true;
  }
  /// Embedding(rows, width, default_generator(), DType::f32, grad).
  Embedding(std::int64_t rows, std::int64_t width, TableGradient grad)
      : Embedding(rows, width, default_generator(), DType::f32, grad) {}
  Tensor forward(const Tensor& indices) override { return embedding(weight_, indices, grad_); }
  const Tensor& weight() const noexcept { return weight_; }
  TableGradient gradient() const noexcept { return grad_; }

 private:
  TableGradient grad_;
  Tensor weight_;
};

}  // namespace strata::nn

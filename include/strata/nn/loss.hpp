/// \file
/// Losses with an explicit reduction, including tf.distribute's "sum over the global batch",
/// whose per-replica gradients add up to the gradient of the global-batch mean.
#pragma once

#include <cstdint>

#include <strata/ops/elementwise.hpp>
#include <strata/ops/loss.hpp>
#include <strata/ops/reduce.hpp>

namespace strata::nn {

/// How per-example losses become one number.
enum class Reduction {
  mean,                   ///< divided by this batch's size
  sum,                    ///< summed
  sum_over_global_batch,  ///< summed, divided by the global batch size (across all replicas)
};

/// Softmax cross-entropy of logits [N, C] against class labels [N].
/// With Reduction::sum_over_global_batch, `global_batch` is the number of examples in this
/// step across every replica (Batch::global_size).
inline Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Reduction r = Reduction::mean,
                            std::int64_t global_batch = 0) {
  double scale = 1.0;
  switch (r) {
    case Reduction::mean:
      STRATA_CHECK(logits.dim(0) > 0, "cross_entropy: mean over an empty batch");
      scale = 1.0 / static_cast<double>(logits.dim(0));
      break;
    case Reduction::sum: break;
    case Reduction::sum_over_global_batch:
      STRATA_CHECK(global_batch > 0, "cross_entropy: sum_over_global_batch needs the global batch size, got ",
                   global_batch);
      scale = 1.0 / static_cast<double>(global_batch);
      break;
  }
  return softmax_cross_entropy(logits, labels, scale);
}

/// Mean squared error over all elements.
inline Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  Tensor d = sub(pred, target);
  return mean(mul(d, d));
}

}  // namespace strata::nn

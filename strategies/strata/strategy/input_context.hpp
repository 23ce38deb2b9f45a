/// \file
/// InputContext: what a per-worker input function is told (tf.distribute's InputContext), for
/// users who shard and batch their input themselves: `strategy.distribute(fn)` calls
/// `fn(context)` once on each worker and takes the pipeline it returns as that worker's input.
///
/// @code
/// auto data = strategy.distribute([&](const strata::InputContext& ctx) {
///   return strata::data::Pipeline(my_examples())
///       .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
///       .batch(ctx.per_worker_batch_size(256));
/// });
/// @endcode
#pragma once

#include <cstdint>
#include <type_traits>

#include <strata/data/pipeline.hpp>  // split_begin
#include <strata/support/check.hpp>

namespace strata {

struct InputContext {
  int num_input_pipelines = 1;   ///< workers reading input: the processes of a multi-process strategy, else 1
  int input_pipeline_id = 0;     ///< this worker's, in [0, num_input_pipelines)
  int num_replicas_in_sync = 1;  ///< replicas across every worker

  /// This worker's balanced share of a global batch of `global` examples (the first
  /// global % workers workers take one more): the batch size its pipeline's batches have.
  std::int64_t per_worker_batch_size(std::int64_t global) const {
    STRATA_CHECK(global >= num_input_pipelines, "per_worker_batch_size(", global, "): a global batch needs at least "
                 "one example per worker (", num_input_pipelines, ")");
    return data::detail::split_begin(global, input_pipeline_id + 1, num_input_pipelines) -
           data::detail::split_begin(global, input_pipeline_id, num_input_pipelines);
  }
};

/// A per-worker input function: `fn(context)` returns this worker's pipeline.
template <class F>
concept InputFunction = std::is_invocable_r_v<data::Pipeline, F&, const InputContext&>;

}  // namespace strata

/// \file
/// GradientLayout: where MirroredStrategy's replicas hold the summed gradients after backward.
/// The mechanism, detail::ShardedGradients, is in detail/sharded_gradients.hpp.
#pragma once

#include <strata/runtime/process.hpp>  // env

namespace strata {

/// Where MirroredStrategy's replicas hold the summed gradients after backward
/// (MirroredOptions::gradients).
enum class GradientLayout {
  whole,    ///< every replica holds the whole sum (as DDP's gradients after backward)
  sharded,  ///< each replica holds the sum in its share; completed when read through Gradients before
            ///< apply_gradients, which consumes them (needs the split update)
};

/// STRATA_GRADIENTS: whole (the default) or sharded.
inline GradientLayout default_gradient_layout() {
  return runtime::detail::env_either("STRATA_GRADIENTS", "whole", "sharded", "strata.strategy") ? GradientLayout::sharded
                                                                                                 : GradientLayout::whole;
}

}  // namespace strata

/// \file
/// The gradient path's options, as the strategies' options carry them: where the summed
/// gradients are held (GradientLayout), how the update is laid out over the replicas
/// (UpdateSplit, and how UpdateSplit::measured probes: SplitChoiceOptions), and the wire's
/// number format (Compression). Each option's mechanism is a header of this folder.
#pragma once

#include <string_view>

#include <strata/runtime/process.hpp>  // env
#include <strata/support/check.hpp>

namespace strata {

/// Gradient compression on the wire (Horovod's Compression.fp16): float32 buckets travel as
/// 16-bit floats, each partial sum added in float32 and rounded back. Halves the bytes; the
/// all-reduced gradient is within (2N-1)·u·Σ|g_r| of the exact sum (N replicas; u = 2^-11
/// for fp16, 2^-8 for bf16; fp16 also flushes magnitudes below 2^-24). Multi-process
/// collectives only: InProcess replicas share memory and have no wire.
enum class Compression { none, fp16, bf16 };

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

/// How MirroredStrategy and MultiWorkerMirroredStrategy apply the optimizer's update to
/// their replicas' copies (MirroredOptions::split_update, MultiWorkerOptions::split_update).
enum class UpdateSplit {
  off,       ///< every replica updates all of its copy
  on,        ///< each replica updates its share and writes it into the other copies (PartitionedUpdate)
  measured,  ///< step by step, whichever of the two the update phase measurably costs less
};

/// STRATA_SPLIT_UPDATE: 0 (off), 1 (on) or auto (measured, the default).
inline UpdateSplit default_split_update() {
  const char* v = runtime::detail::env("STRATA_SPLIT_UPDATE");
  if (v == nullptr || std::string_view(v) == "auto") return UpdateSplit::measured;
  if (std::string_view(v) == "0") return UpdateSplit::off;
  if (std::string_view(v) == "1") return UpdateSplit::on;
  STRATA_THROW(::strata::invalid_argument, "strata.strategy", "STRATA_SPLIT_UPDATE='", v,
               "' is none of 0, 1, auto");
}

/// How UpdateSplit::measured probes (MirroredOptions::split_choice,
/// MultiWorkerOptions::split_choice). The defaults suit steps of milliseconds.
struct SplitChoiceOptions {
  int warmup = 2;        ///< first steps not measured (first touches, the state made)
  int first_probe = 5;   ///< the step of the first probe of the way not held
  int probe_every = 64;  ///< steps between probes after a switch (up to 8 times that later)
  int probe_steps = 4;   ///< length of a probe (2..64); its first step, the switch, is not measured
  double margin = 0.1;   ///< the other way must cost this share less to be taken
};

}  // namespace strata

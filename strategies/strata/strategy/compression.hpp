/// \file
/// Compression: gradient compression on the wire (MultiWorkerMirroredOptions::compression).
#pragma once

namespace strata {

/// Gradient compression on the wire (Horovod's Compression.fp16): float32 buckets travel as
/// 16-bit floats, each partial sum added in float32 and rounded back. Halves the bytes; the
/// all-reduced gradient is within (2N-1)·u·Σ|g_r| of the exact sum (N replicas; u = 2^-11
/// for fp16, 2^-8 for bf16; fp16 also flushes magnitudes below 2^-24). Multi-process
/// collectives only: InProcess replicas share memory and have no wire.
enum class Compression { none, fp16, bf16 };

}  // namespace strata

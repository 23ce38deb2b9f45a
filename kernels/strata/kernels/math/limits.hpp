/// \file
/// Limits the tensors and the kernels agree on.
#pragma once

namespace strata {

/// The most dimensions a tensor may have; strided kernels size their index arrays by it.
inline constexpr int kMaxDims = 6;

}  // namespace strata

/// \file
/// Deprecated path of <strata/tensor/cuda/backend.cuh>, the tensors' CUDA backend (which sits
/// above the kernels it launches). Kept so that programs written against it still build.
#pragma once

#pragma message("<strata/kernels/cuda/backend.cuh> is deprecated: include <strata/tensor/cuda/backend.cuh>")
#include <strata/tensor/cuda/backend.cuh>

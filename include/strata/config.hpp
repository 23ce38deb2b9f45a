/// \file
/// Build configuration: which optional dependencies this build has, and the host/device
/// annotation macro shared by CPU and CUDA code.
#pragma once

#if __cplusplus < 202002L
#error "strata needs C++20 (-std=c++20 or newer)"
#endif

// Each optional dependency is switched on by its Meson option, which defines the macro.
#ifndef STRATA_HAS_BLAS
#define STRATA_HAS_BLAS 0
#endif
#ifndef STRATA_HAS_ZLIB
#define STRATA_HAS_ZLIB 0
#endif
#ifndef STRATA_HAS_CRYPTO
#define STRATA_HAS_CRYPTO 0
#endif
#ifndef STRATA_HAS_MPI
#define STRATA_HAS_MPI 0
#endif
#ifndef STRATA_HAS_GLOO
#define STRATA_HAS_GLOO 0
#endif
#ifndef STRATA_HAS_CUDA
#define STRATA_HAS_CUDA 0
#endif
#ifndef STRATA_HAS_NCCL
#define STRATA_HAS_NCCL 0
#endif
#ifndef STRATA_HAS_CUDNN
#define STRATA_HAS_CUDNN 0
#endif

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__ inline
#else
#define STRATA_HOST_DEVICE inline
#endif

#if defined(__GNUC__) || defined(__clang__)
#define STRATA_RESTRICT __restrict__
#define STRATA_LIKELY(x) __builtin_expect(!!(x), 1)
#define STRATA_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define STRATA_RESTRICT
#define STRATA_LIKELY(x) (x)
#define STRATA_UNLIKELY(x) (x)
#endif

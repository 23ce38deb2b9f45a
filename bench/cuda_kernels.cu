// bench_train_cuda's one nvcc translation unit: including backend.cuh registers the CUDA
// kernels for the whole program, so bench_train.cpp (compiled by the host compiler, as for
// bench_train) trains on cuda:N with --device cuda:N.
#include <strata/tensor/cuda/backend.cuh>

// The trainers' CUDA kernels: the one translation unit of fashion_mnist_cuda and
// char_transformer_cuda that nvcc compiles (once, and linked into the CUDA benchmarks and
// tests as well).
// Including backend.cuh registers the CUDA backend at static initialisation for the whole
// program, so main.cpp, compiled by the host compiler as for the CPU trainer, creates tensors
// on cuda devices with --device cuda:N.
#include <strata/tensor/cuda/backend.cuh>

// The Fashion-MNIST trainer compiled by nvcc: the same program as main.cpp, with the CUDA
// kernels registered, so --device cuda:N trains on a GPU.
#include <strata/kernels/cuda/backend.cuh>

#include "main.cpp"

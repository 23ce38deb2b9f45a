// Must not compile in a build without CUDA: the error names the Meson option to turn on.
#include <strata/kernels/cuda/allocator.hpp>
int main() { return 0; }

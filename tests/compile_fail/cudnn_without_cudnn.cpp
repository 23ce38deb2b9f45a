// Must not compile in a build without cuDNN: the error names the Meson option to turn on.
#include <strata/kernels/cuda/conv_cudnn.hpp>
int main() { return 0; }

// Must not compile in a build without NCCL: the error names the Meson options to turn on.
#include <strata/collective/nccl.hpp>
int main() { return 0; }

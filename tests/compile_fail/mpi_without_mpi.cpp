// Must not compile in a build without MPI: the error names the Meson option to turn on.
#include <strata/collective/mpi.hpp>
int main() { return 0; }

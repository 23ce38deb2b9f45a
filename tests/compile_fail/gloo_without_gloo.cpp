// Must not compile in a build without Gloo: the error names the Meson option to turn on.
#include <strata/collective/gloo.hpp>
int main() { return 0; }

// doctest's implementation and main(), compiled once and linked into every test program.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.hpp"

// doctest under either spelling: <doctest.h> (the subproject fallback) or
// <doctest/doctest.h> (Debian/Ubuntu doctest-dev). The subproject's wins when both exist.
#pragma once
#if __has_include(<doctest.h>)
#include <doctest.h>
#else
#include <doctest/doctest.h>
#endif

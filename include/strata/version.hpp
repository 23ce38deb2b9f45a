/// \file
/// strata's version.
#pragma once

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0

namespace strata {
/// The library version as "major.minor.patch".
inline constexpr const char* version_string = "0.1.0";
}  // namespace strata

/// \file
/// SourceSite: where a call came from (the caller's file and line), taken as a defaulted last
/// argument, `SourceSite at = SourceSite::current()`, as std::source_location is. Its own type
/// because clang 14 with libstdc++ 12 has no std::source_location; the builtins behind it are
/// GCC's and clang's both, and give the outermost caller's place through nested defaults.
#pragma once

namespace strata {

struct SourceSite {
  const char* file = "";
  unsigned line = 0;

  static constexpr SourceSite current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    return {file, line};
  }
};

}  // namespace strata

/// \file
/// Always-on checks that throw. STRATA_CHECK(cond, parts...) throws strata::invalid_argument
/// with file:line, the condition text and the message parts; STRATA_CHECK_EQ and friends also
/// print both values.
#pragma once

#include <sstream>  // std::ostringstream
#include <string>

#include <strata/config.hpp>         // STRATA_UNLIKELY
#include <strata/support/error.hpp>  // strata::invalid_argument

namespace strata::detail {

/// Concatenates every argument with operator<<.
template <class... Parts>
std::string make_message(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <class Error, class... Parts>
[[noreturn]] void throw_error(const char* id, const char* file, int line, const Parts&... parts) {
  throw Error(make_message("[", id, "] ", parts..., " (", file, ":", line, ")"));
}

}  // namespace strata::detail

/// Throws `type` with a message that starts with the stable id `id`.
#define STRATA_THROW(type, id, ...) ::strata::detail::throw_error<type>(id, __FILE__, __LINE__, __VA_ARGS__)

/// Throws strata::invalid_argument naming the failed condition unless `cond` holds.
#define STRATA_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (STRATA_UNLIKELY(!(cond)))                                                           \
      STRATA_THROW(::strata::invalid_argument, "strata.check", "check failed: " #cond ": ", \
                   __VA_ARGS__);                                                            \
  } while (0)

#define STRATA_CHECK_OP_(a, b, op, ...)                                                        \
  do {                                                                                         \
    const auto& strata_a_ = (a);                                                               \
    const auto& strata_b_ = (b);                                                               \
    if (STRATA_UNLIKELY(!(strata_a_ op strata_b_)))                                            \
      STRATA_THROW(::strata::invalid_argument, "strata.check", "check failed: " #a " " #op " " \
                   #b " (", strata_a_, " vs ", strata_b_, "): ", __VA_ARGS__);                 \
  } while (0)

#define STRATA_CHECK_EQ(a, b, ...) STRATA_CHECK_OP_(a, b, ==, __VA_ARGS__)
#define STRATA_CHECK_NE(a, b, ...) STRATA_CHECK_OP_(a, b, !=, __VA_ARGS__)
#define STRATA_CHECK_LT(a, b, ...) STRATA_CHECK_OP_(a, b, <, __VA_ARGS__)
#define STRATA_CHECK_LE(a, b, ...) STRATA_CHECK_OP_(a, b, <=, __VA_ARGS__)
#define STRATA_CHECK_GT(a, b, ...) STRATA_CHECK_OP_(a, b, >, __VA_ARGS__)
#define STRATA_CHECK_GE(a, b, ...) STRATA_CHECK_OP_(a, b, >=, __VA_ARGS__)

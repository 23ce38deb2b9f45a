/// \file
/// Always-on checks that throw. STRATA_CHECK(cond, parts...) throws strata::invalid_argument
/// with file:line, the condition text and the message parts; STRATA_CHECK_EQ and friends also
/// print both values; STRATA_REQUIRE(cond, type, id, parts...) throws `type` with an area's id.
#pragma once

#include <strata/config.hpp>         // STRATA_UNLIKELY
#include <strata/support/error.hpp>  // strata::invalid_argument, STRATA_THROW

/// Throws `type` with the stable id `id` and the message parts unless `cond` holds: a check
/// whose failure belongs to an area (a checkpoint, the parameter server) rather than to a
/// misused argument.
#define STRATA_REQUIRE(cond, type, id, ...)                            \
  do {                                                                 \
    if (STRATA_UNLIKELY(!(cond))) STRATA_THROW(type, id, __VA_ARGS__); \
  } while (0)

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

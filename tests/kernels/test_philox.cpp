// Philox4x32-10 against Random123's published known-answer vectors (its tests/kat_vectors).
#include "doctest.hpp"

#include <strata/kernels/math/philox.hpp>

using strata::kernels::math::Philox4x32;
using strata::kernels::math::philox4x32_10;

namespace {
bool same(const Philox4x32& a, const Philox4x32& b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}
}  // namespace

TEST_CASE("Kernels.Philox4x32x10.KnownAnswers") {
  CHECK(same(philox4x32_10({{0, 0, 0, 0}}, 0, 0), {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}));
  CHECK(same(philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu),
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}));
  CHECK(same(philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u),
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}));
}

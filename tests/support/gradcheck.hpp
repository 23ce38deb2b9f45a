// What the float64 gradient checks share: a random float64 input that requires its gradient,
// and the check that an op's gradients match central finite differences (strata::gradcheck).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "doctest.hpp"

#include <strata/strata.hpp>

namespace support {

using Inputs = std::vector<strata::Tensor>;

/// A float64 tensor of `s`, uniform in [lo, hi) from `seed`, that requires its gradient.
inline strata::Tensor var(const strata::Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  strata::Generator g(seed);
  return strata::uniform(s, lo, hi, g, strata::DType::f64).requires_grad_();
}

/// Checks fn's gradients with respect to `in` against finite differences; `what` names the op.
inline void expect_gradients_match(const char* what, const std::function<strata::Tensor(const Inputs&)>& fn,
                                   const Inputs& in) {
  const auto r = strata::gradcheck(fn, in);
  INFO(what, ": ", r.message, " (max abs error ", r.max_abs_error, ")");
  CHECK(r.ok);
}

}  // namespace support

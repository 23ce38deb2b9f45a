/// \file
/// for_each_blocked: calls f(i) for i in [0, n) in blocks of a constant size. GCC and clang
/// vectorise the constant-trip inner loop at -O2 (where loops of unknown length are left
/// scalar by GCC's default cost model), provided the kernel's pointers are restrict-qualified
/// parameters and the lambda captures them by reference.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

inline constexpr int kBlock = 8;

template <class F>
inline void for_each_blocked(std::int64_t n, F&& f) {
  const std::int64_t full = n - n % kBlock;
  for (std::int64_t i = 0; i < full; i += kBlock)
    for (int j = 0; j < kBlock; ++j) f(i + j);
  for (std::int64_t i = full; i < n; ++i) f(i);
}

}  // namespace strata::kernels::cpu

/// \file
/// ps::release_bytes: gives the memory of a range of a variable back to the system. A server
/// does so with the rows of tables it does not hold, a worker with a remote table while the
/// servers hold its values (docs/design/sparse_tables.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>  // madvise
#endif

namespace strata::ps {

/// Zeros [p, p + n): the whole pages in it go back to the system (they read as zeros and take
/// no memory until written), the bytes sharing a page with others are cleared.
inline void release_bytes(char* p, std::size_t n) {
#if defined(__linux__)
  constexpr std::uintptr_t page = 4096;
  const auto begin = reinterpret_cast<std::uintptr_t>(p), end = begin + n;
  const std::uintptr_t lo = (begin + page - 1) / page * page, hi = end / page * page;
  if (hi > lo) {
    std::memset(p, 0, lo - begin);
    ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    std::memset(reinterpret_cast<char*>(hi), 0, end - hi);
    return;
  }
#endif
  std::memset(p, 0, n);
}

}  // namespace strata::ps

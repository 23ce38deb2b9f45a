/// \file
/// The caching host allocator. Freed blocks go to a free list per size class and are handed
/// out again, so a training step that repeats the same shapes allocates nothing from the
/// system after its first iteration. Blocks are 64-byte aligned (one cache line, AVX-512 wide).
#pragma once

#include <sys/resource.h>  // getrlimit: the address-space limit an out-of-memory error names

#include <cstddef>  // std::size_t
#include <cstdio>   // std::snprintf
#include <cstdlib>  // std::aligned_alloc, std::free
#include <string>

#include <strata/kernels/memory/size_class_cache.hpp>  // SizeClassCache, AllocatorStats
#include <strata/support/error.hpp>                    // out_of_memory

#if defined(__linux__)
#include <sys/mman.h>  // madvise
#endif

namespace strata::detail {

/// Host memory from the C runtime, 64-byte aligned (one cache line, AVX-512 wide). Blocks of
/// kHugeFrom bytes or more (a step's activations and their gradients, datasets, embedding
/// tables) are 2 MiB aligned and whole 2 MiB pages, and ask Linux for transparent huge pages:
/// a GEMM sweeping a 2048 x 512 activation in blocks of 256 rows touches 128 pages of 4 KiB a
/// block, and a step's tensors are far more than the TLB holds (the Transformer's weight
/// gradients ran 10-20 % slower than from warm pages); rows read in random order (a batch's
/// copy) miss once per 2 MiB instead of once per 4 KiB. The cost is the rounding: at most
/// 2 MiB less 64 bytes a block, in peak RSS (docs/performance.md).
struct HostBacking {
  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kMinBlock = kAlignment;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kHugeFrom = std::size_t{1} << 20;  // 1 MiB: at most half the pages unused
  void* allocate(std::size_t bytes) noexcept {
    if (bytes < kHugeFrom) return std::aligned_alloc(kAlignment, bytes);  // sizes: multiples of 64
    const std::size_t whole = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, whole);
#if defined(__linux__)
    if (p) ::madvise(p, whole, MADV_HUGEPAGE);  // a hint: without it (or refused) pages stay 4 KiB
#endif
    return p;
  }
  void deallocate(void* p) noexcept { std::free(p); }
  /// What a request the system refused (the cache already emptied) says: its bytes, the
  /// tensors' bytes in use and at their peak, and the address-space limit (ulimit -v,
  /// prlimit --as) where one is set, which is what usually refuses it.
  [[noreturn]] void out_of_memory(std::size_t bytes, const AllocatorStats& s) {
    auto mib = [](std::size_t b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
      return std::string(buf);
    };
    std::string limit;
    if (rlimit r{}; ::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      limit = "; the process's address space is limited to " + mib(static_cast<std::size_t>(r.rlim_cur));
    throw ::strata::out_of_memory("[strata.memory] out of host memory allocating " + mib(bytes) + " (" +
                                  mib(s.bytes_in_use) + " in use by tensors, at most " + mib(s.peak_bytes_in_use) +
                                  " so far, the cache already emptied" + limit + ")");
  }
};

}  // namespace strata::detail

namespace strata {

/// The process-wide caching allocator for host memory.
class CachingHostAllocator : public detail::SizeClassCache<detail::HostBacking> {
 public:
  static constexpr std::size_t kAlignment = detail::HostBacking::kAlignment;

  /// The process-wide instance (never destroyed, so tensors in static objects stay valid).
  static CachingHostAllocator& instance() {
    static auto* a = new CachingHostAllocator();
    return *a;
  }

 private:
  CachingHostAllocator() = default;
};

}  // namespace strata

/// \file
/// The caching host allocator. Freed blocks go to a free list per size class and are handed
/// out again, so a training step that repeats the same shapes allocates nothing from the
/// system after its first iteration. Blocks are 64-byte aligned (one cache line, AVX-512 wide).
#pragma once

#include <algorithm>  // std::max
#include <array>
#include <bit>      // std::bit_width
#include <cstddef>  // std::size_t
#include <cstdint>
#include <cstdlib>  // std::aligned_alloc, std::free
#include <mutex>
#include <new>  // std::bad_alloc
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>  // madvise
#endif

namespace strata {

/// What the caching allocator has done so far.
struct AllocatorStats {
  std::uint64_t system_allocations = 0;  ///< blocks taken from the system
  std::uint64_t cache_hits = 0;          ///< requests served from a free list
  std::size_t bytes_in_use = 0;          ///< bytes handed out and not yet returned
  std::size_t bytes_cached = 0;          ///< bytes held in free lists
  std::size_t peak_bytes_in_use = 0;
};

namespace detail {

/// Size classes: 64-byte steps up to 1 KiB, then four classes per power of two, so a block
/// wastes at most 25 % of its bytes.
class SizeClasses {
 public:
  static constexpr int kCount = 16 + 4 * 40;

  static int index(std::size_t bytes) noexcept {
    if (bytes <= 1024) return static_cast<int>((bytes + 63) / 64);  // 0..16
    const int hb = std::bit_width(bytes - 1) - 1;                   // bytes-1 in [2^hb, 2^(hb+1))
    const int sub = static_cast<int>(((bytes - 1) >> (hb - 2)) & 3);  // which quarter of it
    return 16 + (hb - 10) * 4 + sub + 1;
  }
  static std::size_t bytes_of(int idx) noexcept {
    if (idx <= 16) return static_cast<std::size_t>(idx) * 64;
    const int k = idx - 17;
    const int hb = 10 + k / 4, sub = k % 4;
    return (std::size_t{1} << hb) + static_cast<std::size_t>(sub + 1) * (std::size_t{1} << (hb - 2));
  }
};


/// Free lists per size class over a backing source of memory. `Backing` provides
///   void* allocate(std::size_t bytes)        nullptr when the source is exhausted
///   void deallocate(void* p) noexcept
///   [[noreturn]] void out_of_memory(std::size_t bytes, const AllocatorStats&)
/// A request the source cannot serve empties the cache and tries once more before
/// out_of_memory reports it. Thread-safe; the lock is held only to push or pop a free list.
template <class Backing>
class SizeClassCache {
 public:
  explicit SizeClassCache(Backing backing = {}) : backing_(std::move(backing)) {}
  SizeClassCache(const SizeClassCache&) = delete;
  SizeClassCache& operator=(const SizeClassCache&) = delete;

  /// A block of at least `bytes` bytes; `bytes == 0` gives a valid, unique, empty block.
  void* allocate(std::size_t bytes) {
    const int c = SizeClasses::index(bytes);
    const std::size_t rounded = std::max(SizeClasses::bytes_of(c), Backing::kMinBlock);
    {
      std::lock_guard lock(mu_);
      auto& list = free_[static_cast<std::size_t>(c)];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        stats_.bytes_cached -= rounded;
        ++stats_.cache_hits;
        note_in_use(rounded);
        return p;
      }
    }
    void* p = backing_.allocate(rounded);
    if (p == nullptr) {
      empty_cache();
      p = backing_.allocate(rounded);
    }
    std::lock_guard lock(mu_);
    if (p == nullptr) backing_.out_of_memory(rounded, stats_);
    ++stats_.system_allocations;
    note_in_use(rounded);
    return p;
  }

  /// Returns a block obtained from allocate(`bytes`) to its free list.
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (p == nullptr) return;
    const int c = SizeClasses::index(bytes);
    const std::size_t rounded = std::max(SizeClasses::bytes_of(c), Backing::kMinBlock);
    std::lock_guard lock(mu_);
    stats_.bytes_in_use -= rounded;
    try {
      free_[static_cast<std::size_t>(c)].push_back(p);
      stats_.bytes_cached += rounded;
    } catch (...) {  // the free list could not grow: give the block back to its source
      backing_.deallocate(p);
    }
  }

  /// Gives every cached block back to its source.
  void empty_cache() noexcept {
    std::lock_guard lock(mu_);
    for (auto& list : free_) {
      for (void* p : list) backing_.deallocate(p);
      list.clear();
      list.shrink_to_fit();
    }
    stats_.bytes_cached = 0;
  }

  AllocatorStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  void note_in_use(std::size_t rounded) noexcept {
    stats_.bytes_in_use += rounded;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  mutable std::mutex mu_;
  std::array<std::vector<void*>, SizeClasses::kCount> free_;
  AllocatorStats stats_;
  Backing backing_;
};

/// Host memory from the C runtime, 64-byte aligned (one cache line, AVX-512 wide). Blocks of
/// kHugeFrom bytes or more (datasets, large embedding tables) are 2 MiB aligned and whole
/// 2 MiB pages, and ask Linux for transparent huge pages: rows read in random order then
/// miss the TLB once per 2 MiB instead of once per 4 KiB, which is what a batch's row copy
/// waits on (a batch of 64 Fashion-MNIST rows: a third less time; docs/performance.md).
struct HostBacking {
  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kMinBlock = kAlignment;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kHugeFrom = std::size_t{16} << 20;
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
  [[noreturn]] void out_of_memory(std::size_t, const AllocatorStats&) { throw std::bad_alloc(); }
};

}  // namespace detail

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

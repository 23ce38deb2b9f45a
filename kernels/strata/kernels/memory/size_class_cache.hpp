/// \file
/// SizeClassCache: a caching allocator over any backing (host memory, a CUDA device, pinned
/// host memory). Freed blocks go to a free list per size class and are handed out again, so a
/// training step that repeats the same shapes allocates nothing from the backing after its
/// first iteration. Device-neutral: the tensors' host allocator and the CUDA kernels'
/// workspaces are both made of it.
#pragma once

#include <algorithm>  // std::max
#include <array>
#include <bit>      // std::bit_width
#include <cstddef>  // std::size_t
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

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
/// A free list keeps room for every block of its class, reserved when the block is made, so
/// deallocate never allocates.
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
    // Room in its free list for the new block, made now: giving a block back then never
    // allocates. (Otherwise a step that once holds one block more than any before, a batch
    // prefetched a little earlier, grows the list inside a later step.)
    auto& list = free_[static_cast<std::size_t>(c)];
    const std::size_t made = made_[static_cast<std::size_t>(c)] + 1;
    if (list.capacity() < made) {
      try {
        list.reserve(std::max(made, 2 * list.capacity()));
      } catch (...) {
        backing_.deallocate(p);
        throw;
      }
    }
    made_[static_cast<std::size_t>(c)] = made;
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
    for (std::size_t c = 0; c < free_.size(); ++c) {
      auto& list = free_[c];
      for (void* p : list) backing_.deallocate(p);
      made_[c] -= list.size();
      list.clear();
      if (made_[c] == 0) list.shrink_to_fit();  // blocks still in use keep their room
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
  std::array<std::size_t, SizeClasses::kCount> made_{};  // blocks taken from the backing and held, per class
  AllocatorStats stats_;
  Backing backing_;
};

}  // namespace detail

}  // namespace strata

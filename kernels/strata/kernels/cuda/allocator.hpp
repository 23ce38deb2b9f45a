/// \file
/// The caching allocators of CUDA memory: one per device for device memory (cudaMalloc, never
/// managed memory) and one per process for pinned host staging buffers (cudaHostAlloc). Both
/// keep freed blocks in size-class free lists (the host allocator's), so a steady-state step
/// calls neither cudaMalloc nor cudaFree. A request the device cannot serve first gives every
/// cached block back and retries; then it is a cuda_error that says how much was in use.
#pragma once

#include <strata/kernels/cuda/runtime.hpp>  // without CUDA: its #error is the only message

#if STRATA_HAS_CUDA

#include <string>

#include <strata/kernels/memory/size_class_cache.hpp>  // SizeClassCache, AllocatorStats

namespace strata::kernels::cuda {

namespace detail {

inline std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

/// Device memory of one device.
struct DeviceBacking {
  static constexpr std::size_t kMinBlock = 256;  // cudaMalloc's alignment
  int device = 0;

  void* allocate(std::size_t bytes) {
    DeviceGuard on(device);
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(rc, "cudaMalloc");
    return p;
  }
  void deallocate(void* p) noexcept {
    int prev = 0;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(device);
    (void)cudaFree(p);
    (void)cudaSetDevice(prev);
  }
  [[noreturn]] void out_of_memory(std::size_t bytes, const AllocatorStats& s) {
    STRATA_THROW(cuda_error, "strata.cuda", "out of memory on cuda:", device, " allocating ", mib(bytes), " (",
                 mib(s.bytes_in_use), " in use by tensors, the cache already emptied)");
  }
};

/// Page-locked host memory, so transfers run at the bus's speed and asynchronously.
struct PinnedBacking {
  static constexpr std::size_t kMinBlock = 64;
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t rc = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(rc, "cudaHostAlloc");
    return p;
  }
  void deallocate(void* p) noexcept { (void)cudaFreeHost(p); }
  [[noreturn]] void out_of_memory(std::size_t bytes, const AllocatorStats&) {
    STRATA_THROW(cuda_error, "strata.cuda", "out of pinned host memory allocating ", mib(bytes));
  }
};

}  // namespace detail

/// The caching allocator of one device's memory.
class CachingDeviceAllocator : public strata::detail::SizeClassCache<detail::DeviceBacking> {
 public:
  /// The allocator of `device` (created on first use, never destroyed: tensors in static
  /// objects stay valid).
  static CachingDeviceAllocator& of(int device) {
    struct Tag;
    return *per_device<Tag, CachingDeviceAllocator*>(device, [device] { return new CachingDeviceAllocator(device); });
  }

 private:
  explicit CachingDeviceAllocator(int device) : SizeClassCache(detail::DeviceBacking{device}) {}
};

/// The caching allocator of pinned host memory (staging buffers for transfers).
class CachingPinnedAllocator : public strata::detail::SizeClassCache<detail::PinnedBacking> {
 public:
  static CachingPinnedAllocator& instance() {
    static auto* a = new CachingPinnedAllocator();
    return *a;
  }

 private:
  CachingPinnedAllocator() = default;
};

/// A pinned staging buffer, returned to the cache when it goes out of scope.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes), p_(CachingPinnedAllocator::instance().allocate(bytes)) {}
  ~PinnedBuffer() { CachingPinnedAllocator::instance().deallocate(p_, bytes_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const noexcept { return p_; }

 private:
  std::size_t bytes_;
  void* p_;
};

}  // namespace strata::kernels::cuda

#endif  // STRATA_HAS_CUDA

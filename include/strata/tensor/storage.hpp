/// \file
/// Storage: a reference-counted block of device memory that tensors (and their views) share.
/// Storage and tensor headers come from an object pool, so a steady-state step allocates
/// neither data nor bookkeeping from the system.
#pragma once

#include <algorithm>  // std::max
#include <atomic>
#include <cstddef>
#include <memory>  // shared_ptr
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/tensor/allocator.hpp>  // CachingHostAllocator
#include <strata/tensor/device_backend.hpp>  // backend_of
#include <strata/tensor/device.hpp>     // Device

namespace strata::detail {

/// A free list of fixed-size objects shared by all threads. The objects are constructed in
/// place on acquire and destroyed on release; only their memory is recycled. The free list
/// keeps room for every object made, reserved when the object is made, so giving one back
/// never allocates.
template <class T>
class ObjectPool {
 public:
  static ObjectPool& instance() {
    static auto* p = new ObjectPool();
    return *p;
  }
  template <class... Args>
  T* make(Args&&... args) {
    void* mem = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        mem = free_.back();
        free_.pop_back();
      } else {
        // Room for it in the free list first: if that throws, nothing was made.
        if (free_.capacity() < made_ + 1) free_.reserve(std::max<std::size_t>(64, 2 * free_.capacity()));
        mem = ::operator new(sizeof(T));
        ++made_;
      }
    }
    try {
      return new (mem) T(std::forward<Args>(args)...);
    } catch (...) {
      give_back(mem);
      throw;
    }
  }
  void destroy(T* p) noexcept {
    p->~T();
    give_back(p);
  }
  /// Objects taken from the system so far (the most ever alive at once).
  std::size_t made() const {
    std::lock_guard lock(mu_);
    return made_;
  }

 private:
  void give_back(void* mem) noexcept {
    std::lock_guard lock(mu_);
    free_.push_back(mem);  // never grows: room was reserved when `mem` was made
  }
  mutable std::mutex mu_;
  std::vector<void*> free_;
  std::size_t made_ = 0;
};

/// A block of memory and the device it lives on (host memory from the caching host
/// allocator, device memory from the device's backend). Intrusively reference-counted.
class StorageImpl {
 public:
  StorageImpl(std::size_t nbytes, Device device) : data_(allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}
  /// Host memory that `keepalive` owns (a shared-memory segment): held while any tensor
  /// views it, and never handed to an allocator.
  StorageImpl(void* data, std::size_t nbytes, std::shared_ptr<void> keepalive)
      : data_(data), nbytes_(nbytes), device_(Device::cpu()), keepalive_(std::move(keepalive)) {}
  ~StorageImpl() {
    if (keepalive_) return;  // the owner frees it when the last holder lets go
    free_memory();
  }
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }

  /// Gives the memory back to its allocator while every view of it stays: what a sharded
  /// strategy does with a unit's gathered parameters between their uses. Until take_memory(),
  /// the views' data pointers are null and must not be read or written.
  void give_memory_back() {
    STRATA_CHECK(!keepalive_, "give_memory_back: this storage's memory belongs to its owner (shared memory)");
    free_memory();
    data_ = nullptr;
  }
  /// Takes memory again after give_memory_back() (its old values are gone: the caller fills
  /// it); a no-op while it holds memory.
  void take_memory() {
    if (data_ == nullptr) data_ = allocate(nbytes_, device_);
  }
  /// Whether the memory is held (false between give_memory_back() and take_memory()).
  bool holds_memory() const noexcept { return data_ != nullptr; }

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) ObjectPool<StorageImpl>::instance().destroy(this);
  }

 private:
  static void* allocate(std::size_t nbytes, Device device) {
    return device.kind == DeviceKind::cpu ? CachingHostAllocator::instance().allocate(nbytes)
                                          : backend_of(device).allocate(device.index, nbytes);
  }
  void free_memory() noexcept {
    if (data_ == nullptr) return;
    if (device_.kind == DeviceKind::cpu)
      CachingHostAllocator::instance().deallocate(data_, nbytes_);
    else  // the backend outlives every storage: it is registered once and never removed
      detail::cuda_backend_slot.load(std::memory_order_acquire)->deallocate(device_.index, data_, nbytes_);
  }

  std::atomic<int> refs_{1};
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> keepalive_;
};

}  // namespace strata::detail

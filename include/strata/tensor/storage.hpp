/// \file
/// Storage: a reference-counted block of device memory that tensors (and their views) share.
/// Storage and tensor headers come from an object pool, so a steady-state step allocates
/// neither data nor bookkeeping from the system.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>  // shared_ptr
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include <strata/tensor/allocator.hpp>  // CachingHostAllocator
#include <strata/tensor/device_backend.hpp>  // backend_of
#include <strata/tensor/device.hpp>     // Device

namespace strata::detail {

/// A free list of fixed-size objects shared by all threads. The objects are constructed in
/// place on acquire and destroyed on release; only their memory is recycled.
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
      }
    }
    if (mem == nullptr) mem = ::operator new(sizeof(T));
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

 private:
  void give_back(void* mem) noexcept {
    std::lock_guard lock(mu_);
    try {
      free_.push_back(mem);
    } catch (...) {
      ::operator delete(mem);
    }
  }
  std::mutex mu_;
  std::vector<void*> free_;
};

/// A block of memory and the device it lives on (host memory from the caching host
/// allocator, device memory from the device's backend). Intrusively reference-counted.
class StorageImpl {
 public:
  StorageImpl(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
    data_ = device.kind == DeviceKind::cpu ? CachingHostAllocator::instance().allocate(nbytes)
                                           : backend_of(device).allocate(device.index, nbytes);
  }
  /// Host memory that `keepalive` owns (a shared-memory segment): held while any tensor
  /// views it, and never handed to an allocator.
  StorageImpl(void* data, std::size_t nbytes, std::shared_ptr<void> keepalive)
      : data_(data), nbytes_(nbytes), device_(Device::cpu()), keepalive_(std::move(keepalive)) {}
  ~StorageImpl() {
    if (keepalive_) return;  // the owner frees it when the last holder lets go
    if (device_.kind == DeviceKind::cpu)
      CachingHostAllocator::instance().deallocate(data_, nbytes_);
    else  // the backend outlives every storage: it is registered once and never removed
      detail::cuda_backend_slot.load(std::memory_order_acquire)->deallocate(device_.index, data_, nbytes_);
  }
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }

  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) ObjectPool<StorageImpl>::instance().destroy(this);
  }

 private:
  std::atomic<int> refs_{1};
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> keepalive_;
};

}  // namespace strata::detail

/// \file
/// DeviceBackend: the function table through which tensors reach a non-CPU device. The CUDA
/// backend lives in include/strata/tensor/cuda/backend.cuh and registers itself when a
/// translation unit compiled by nvcc includes it, so the tensor layer itself never includes a
/// CUDA header and a CPU-only program never needs nvcc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <strata/support/error.hpp>
#include <strata/tensor/device.hpp>
#include <strata/tensor/dtype.hpp>
#include <strata/tensor/shape.hpp>

namespace strata {

/// What the tensor layer needs of a device. Every call names the device by index; pointers
/// are device memory unless the parameter says otherwise. Calls are ordered on the device's
/// stream; `copy` to host memory returns once the bytes are there.
struct DeviceBackend {
  const char* name;
  int (*device_count)() noexcept;
  void* (*allocate)(int device, std::size_t bytes);
  void (*deallocate)(int device, void* p, std::size_t bytes) noexcept;
  /// Copies `bytes` contiguous bytes; either side may be host memory (Device::cpu()).
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
  /// Sets `count` elements of `dtype` to `value`.
  void (*fill)(int device, void* dst, DType dtype, std::int64_t count, double value);
  /// dst (contiguous) = the elements of the strided view (shape, strides) starting at src.
  void (*gather_strided)(int device, void* dst, const void* src, DType dtype, const Shape& shape,
                         const Shape& strides);
  /// Waits for every call queued on the device so far.
  void (*synchronize)(int device);
};

namespace detail {
inline std::atomic<const DeviceBackend*> cuda_backend_slot{nullptr};
}

/// Installs the CUDA backend (backend.cuh does this during static initialisation).
inline void register_cuda_backend(const DeviceBackend* b) noexcept {
  detail::cuda_backend_slot.store(b, std::memory_order_release);
}

/// True when this program has CUDA kernels (some translation unit included backend.cuh).
inline bool has_cuda_backend() noexcept {
  return detail::cuda_backend_slot.load(std::memory_order_acquire) != nullptr;
}

/// How many CUDA devices this program sees: 0 without CUDA kernels.
inline int cuda_device_count() noexcept {
  const DeviceBackend* b = detail::cuda_backend_slot.load(std::memory_order_acquire);
  return b == nullptr ? 0 : b->device_count();
}

/// The backend of `device`'s kind; throws, naming what to do, when this program has none.
inline const DeviceBackend& backend_of(Device device) {
  const DeviceBackend* b = detail::cuda_backend_slot.load(std::memory_order_acquire);
  if (device.kind != DeviceKind::cuda || b == nullptr) {
    STRATA_THROW(invalid_argument, "strata.device",
                 "this program has no CUDA kernels: tensors on cuda devices need a translation unit compiled "
                 "by nvcc that includes <strata/tensor/cuda/backend.cuh>, in a build configured with -Dcuda=enabled");
  }
  const int n = b->device_count();
  if (device.index < 0 || device.index >= n) {
    STRATA_THROW(invalid_argument, "strata.device", "cuda:", device.index, " does not exist: this machine has ", n,
                 " CUDA device(s) visible (CUDA_VISIBLE_DEVICES selects them)");
  }
  return *b;
}

}  // namespace strata

/// \file
/// The CUDA DeviceBackend and DeviceKernels: memory from the caching device allocator, transfers staged through
/// pinned buffers, fill and strided gather as kernels on the device's compute stream.
/// Including this header from a .cu file (compiled by nvcc) registers the backend during
/// static initialisation, which is what lets every translation unit of the program, nvcc's or
/// not, create tensors on cuda devices. (A tensor created on a device by another static
/// object's constructor may run before that registration: create device tensors from main.)
#pragma once

#include <cstring>

#include <strata/kernels/cuda/allocator.hpp>
#include <strata/tensor/cuda/device_kernels.cuh>
#include <strata/kernels/cuda/elementwise.cuh>
#include <strata/tensor/device_backend.hpp>
#include <strata/tensor/half.hpp>
#include <strata/tensor/tensor.hpp>  // detail::visit_dtype

namespace strata::kernels::cuda {

namespace backend {

inline void* allocate(int device, std::size_t bytes) { return CachingDeviceAllocator::of(device).allocate(bytes); }
inline void deallocate(int device, void* p, std::size_t bytes) noexcept {
  CachingDeviceAllocator::of(device).deallocate(p, bytes);
}

/// Host to device: through a pinned buffer, so the copy is a DMA at the bus's speed; the call
/// returns once the bytes have left the staging buffer (the caller's memory is free again).
/// Device to host: the same, the other way round. Device to device: queued on the
/// destination's stream after the source's pending work.
inline void copy(void* dst, Device dd, const void* src, Device sd, std::size_t bytes) {
  const bool dst_host = dd.kind == DeviceKind::cpu, src_host = sd.kind == DeviceKind::cpu;
  if (dst_host && src_host) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (src_host) {
    cudaStream_t s = compute_stream(dd.index);
    PinnedBuffer staging(bytes);
    std::memcpy(staging.get(), src, bytes);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, staging.get(), bytes, cudaMemcpyHostToDevice, s));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  if (dst_host) {
    cudaStream_t s = compute_stream(sd.index);
    PinnedBuffer staging(bytes);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(staging.get(), src, bytes, cudaMemcpyDeviceToHost, s));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(dst, staging.get(), bytes);
    return;
  }
  cudaStream_t s = compute_stream(dd.index);
  if (dd.index == sd.index) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    return;
  }
  DeviceGuard on_src(sd.index);
  Event src_ready;  // on the source's device (an event belongs to the device current at its creation),
  src_ready.record(compute_stream(sd.index));  // whose stream the source's producers run on
  DeviceGuard on(dd.index);
  src_ready.block(s);
  STRATA_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, bytes, s));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(s));  // the event dies here: wait for what it orders
}

inline void fill(int device, void* dst, DType dtype, std::int64_t count, double value) {
  DeviceGuard on(device);
  cudaStream_t s = compute_stream(device);
  if (dtype == DType::f16 || dtype == DType::bf16) {  // the value's 16 bits
    const float v = static_cast<float>(value);
    cuda::fill(static_cast<std::uint16_t*>(dst), count, dtype == DType::f16 ? Half(v).bits : BFloat16(v).bits, s);
    return;
  }
  strata::detail::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    cuda::fill(static_cast<T*>(dst), count, static_cast<T>(value), s);
  });
}

/// A gather moves elements without reading them: only their size matters.
inline void gather_strided(int device, void* dst, const void* src, DType dtype, const Shape& shape,
                           const Shape& strides) {
  DeviceGuard on(device);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    cuda::gather(static_cast<T*>(dst), static_cast<const T*>(src), shape.dims(), strides.dims(), compute_stream(device));
  };
  switch (size_of(dtype)) {
    case 1: return run(std::uint8_t{});
    case 2: return run(std::uint16_t{});
    case 4: return run(std::uint32_t{});
    default: return run(std::uint64_t{});
  }
}

inline void synchronize(int device) {
  DeviceGuard on(device);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(compute_stream(device)));
}

inline int count() noexcept { return device_count(); }

inline constexpr DeviceBackend kTable{"cuda", &count, &allocate, &deallocate, &copy, &fill, &gather_strided, &synchronize};

}  // namespace backend

/// True once this program's CUDA backend is registered (an inline variable: initialised once
/// per program, whichever translation unit includes this header first).
inline const bool backend_registered =
    (register_cuda_kernels(&table::kKernels), register_cuda_backend(&backend::kTable), true);

}  // namespace strata::kernels::cuda

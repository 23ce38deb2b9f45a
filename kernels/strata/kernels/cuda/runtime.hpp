/// \file
/// The CUDA runtime as strata uses it: status checks that turn every failed call into a
/// strata::cuda_error naming the call, the device count (0, not an error, on a machine without
/// a GPU or driver), a guard that switches the current device, RAII streams and events, and
/// the stream each device's work is ordered on. Host code only: any C++ compiler, linked
/// against cudart.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_CUDA
#error "strata's CUDA support needs CUDA: configure strata with -Dcuda=enabled (nvcc and the CUDA toolkit), or by hand: nvcc (or -lcudart -lcublas) and -DSTRATA_HAS_CUDA=1"
#else

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include <strata/support/error.hpp>

namespace strata::kernels::cuda {

/// Throws cuda_error for a failed CUDA runtime call, naming `call`.
inline void check(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  STRATA_THROW(cuda_error, "strata.cuda", call, " failed: ", cudaGetErrorName(rc), " (", cudaGetErrorString(rc), ")");
}

#define STRATA_CUDA_CHECK(call) ::strata::kernels::cuda::check((call), #call)
/// After a kernel launch: a bad launch configuration is reported at once, naming the kernel.
#define STRATA_CUDA_CHECK_LAUNCH(kernel) ::strata::kernels::cuda::check(cudaGetLastError(), "launch of " kernel)

/// The most devices one process addresses (per-device tables are this long).
inline constexpr int kMaxDevices = 64;

/// The number of visible CUDA devices; 0 where there is no driver or no device. The answer
/// is taken once per process.
inline int device_count() noexcept {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" status
      return 0;
    }
    return c < kMaxDevices ? c : kMaxDevices;
  }();
  return n;
}

/// Why there is no device (the runtime's own words), or "" when there is one.
inline std::string no_device_reason() {
  int c = 0;
  const cudaError_t rc = cudaGetDeviceCount(&c);
  (void)cudaGetLastError();
  if (rc != cudaSuccess) return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
  return c == 0 ? "the CUDA runtime reports 0 devices" : "";
}

namespace detail {
/// The device this thread has chosen (set_thread_device or a DeviceGuard), -1 before any.
inline int& thread_device() noexcept {
  thread_local int d = -1;
  return d;
}
}  // namespace detail

/// Makes `device` this thread's device from now on (a replica's or a rank's GPU): the guards
/// then come back to it.
inline void set_thread_device(int device) {
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  detail::thread_device() = device;
}

/// Makes `device` current for this thread while in scope. A thread that had chosen no device
/// stays on `device` afterwards: "restoring" it to device 0 would create a context there
/// (cudaSetDevice does, since CUDA 12), one per rank of a job on one GPU 0 otherwise unused.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : previous_(detail::thread_device()) {
    if (previous_ >= 0) STRATA_CUDA_CHECK(cudaGetDevice(&previous_));  // the thread may have moved since
    if (device != previous_) STRATA_CUDA_CHECK(cudaSetDevice(device));
    if (previous_ < 0) detail::thread_device() = device;
    restore_ = previous_ >= 0 && previous_ != device;  // on its device already: nothing to undo
  }
  ~DeviceGuard() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
  bool restore_ = false;
};

/// An owned, non-blocking stream on the current device.
class Stream {
 public:
  Stream() { STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  cudaStream_t get() const noexcept { return s_; }
  void synchronize() const { STRATA_CUDA_CHECK(cudaStreamSynchronize(s_)); }
  /// True once every call queued so far has finished; throws if one failed.
  bool done() const {
    const cudaError_t rc = cudaStreamQuery(s_);
    if (rc == cudaErrorNotReady) return false;
    check(rc, "cudaStreamQuery");
    return true;
  }

 private:
  cudaStream_t s_ = nullptr;
};

/// An owned event without timing (the cheap kind), for ordering one stream after another.
class Event {
 public:
  Event() { STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  cudaEvent_t get() const noexcept { return e_; }
  void record(cudaStream_t s) { STRATA_CUDA_CHECK(cudaEventRecord(e_, s)); }
  /// Makes `s` wait (on the device, not the host) until the recorded work has finished.
  void block(cudaStream_t s) const { STRATA_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0)); }
  bool done() const {
    const cudaError_t rc = cudaEventQuery(e_);
    if (rc == cudaErrorNotReady) return false;
    check(rc, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

/// The process-wide object of kind `Tag` for `device` (a stream, a library handle, an
/// allocator): made by `make()` with `device` current on first use, never destroyed (it lives
/// as long as the process). Later calls are one atomic load.
template <class Tag, class T, class Make>
T per_device(int device, Make&& make) {
  static std::array<std::atomic<T>, kMaxDevices> slots{};
  static std::mutex mu;
  if (device < 0 || device >= kMaxDevices)
    STRATA_THROW(invalid_argument, "strata.cuda", "device index ", device, " is out of range");
  auto& slot = slots[static_cast<std::size_t>(device)];
  if (T v = slot.load(std::memory_order_acquire)) return v;
  std::lock_guard lock(mu);
  if (T v = slot.load(std::memory_order_acquire)) return v;
  DeviceGuard on(device);
  T v = make();
  slot.store(v, std::memory_order_release);
  return v;
}

/// The stream every strata kernel on `device` is queued on, one per device and process.
/// One stream per device is what lets the caching allocator hand a freed block out again at
/// once: whatever uses it next runs after whatever used it before.
inline cudaStream_t compute_stream(int device) {
  struct Tag;
  return per_device<Tag, cudaStream_t>(device, [] {
    cudaStream_t s = nullptr;
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  });
}

}  // namespace strata::kernels::cuda

#endif  // STRATA_HAS_CUDA

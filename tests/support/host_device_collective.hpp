// A device collective over the stand-in devices of host_device.hpp, for CPU-only test
// programs: a rank of an InProcess group (the bootstrap it is built from, as Nccl is) whose
// buffers are the stand-in's device memory, which is host memory, so InProcess reduces them.
// A strategy over it takes its device-collective path on the CPU: replicas placed on cuda:r,
// their rows moved there, the gradient buckets on the device, each started as backward
// completes it and joined before the update — the path MirroredStrategy<Nccl> runs on GPUs.
#pragma once

#include <span>
#include <string>
#include <utility>

#include <strata/collective/capabilities.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/collective/options.hpp>

namespace support {

class HostDeviceCollective {
 public:
  static constexpr const char* name = "host-device";

  HostDeviceCollective(strata::collective::InProcess& bootstrap, int device, strata::collective::Options = {})
      : boot_(bootstrap), device_(device) {}

  int rank() const { return boot_.rank(); }
  int size() const { return boot_.size(); }
  int device() const noexcept { return device_; }
  bool aborted() const noexcept { return boot_.aborted(); }

  template <class... A>
  void allreduce(A&&... a) { boot_.allreduce(std::forward<A>(a)...); }
  template <class... A>
  void broadcast(A&&... a) { boot_.broadcast(std::forward<A>(a)...); }
  template <class... A>
  void allgather(A&&... a) { boot_.allgather(std::forward<A>(a)...); }
  template <class... A>
  void reduce_scatter(A&&... a) { boot_.reduce_scatter(std::forward<A>(a)...); }
  template <class T>
  auto iallreduce(std::span<T> x, strata::ReduceOp op) { return boot_.iallreduce(x, op); }
  template <class T>
  auto iallgather(std::span<const T> in, std::span<T> out) { return boot_.iallgather(in, out); }
  template <class T>
  auto ireduce_scatter(std::span<const T> in, std::span<T> out, strata::ReduceOp op) {
    return boot_.ireduce_scatter(in, out, op);
  }
  void barrier() { boot_.barrier(); }
  void abort(const std::string& why) { boot_.abort(why); }

  void allreduce_raw(const void* in, void* out, std::size_t n, strata::DType t, strata::ReduceOp op) {
    boot_.allreduce_raw(in, out, n, t, op);
  }
  void broadcast_raw(void* x, std::size_t n, strata::DType t, int root) { boot_.broadcast_raw(x, n, t, root); }
  void allgather_raw(const void* in, void* out, std::size_t n, strata::DType t) { boot_.allgather_raw(in, out, n, t); }
  void reduce_scatter_raw(const void* in, void* out, std::size_t n, strata::DType t, strata::ReduceOp op) {
    boot_.reduce_scatter_raw(in, out, n, t, op);
  }
  // The stand-in's kernels run at once on the calling thread, so "ordered behind the compute
  // stream" is "now", and there is nothing left to join.
  void start_allreduce_raw(void* x, std::size_t n, strata::DType t, strata::ReduceOp op) {
    boot_.allreduce_raw(x, x, n, t, op);
  }
  void join_compute() {}

 private:
  strata::collective::InProcess& boot_;
  int device_;
};

}  // namespace support

template <>
inline constexpr bool strata::enable_collective<support::HostDeviceCollective> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<support::HostDeviceCollective> = true;
template <>
inline constexpr bool strata::collective::enable_device_collective<support::HostDeviceCollective> = true;

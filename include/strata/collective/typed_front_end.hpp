/// \file
/// TypedFrontEnd<Policy>: the typed span overloads every collective policy offers, written
/// once. They check sizes, let the policy finish its pending asynchronous work
/// (`before_blocking()`), note where they were called from (the caller's file and line: the
/// flight recorder's label and the desync check's call site, unless an outer caller set one),
/// then call the policy's type-erased core:
///   allreduce_raw(in, out, count, dtype, op)       in == out means in place
///   broadcast_raw(x, count, dtype, root)
///   allgather_raw(in, out, count, dtype)            count = elements per rank
///   reduce_scatter_raw(in, out, count, dtype, op)   count = elements per rank
#pragma once

#include <span>
#include <type_traits>

#include <strata/collective/flight_recorder.hpp>  // CallSite
#include <strata/collective/reduce_op.hpp>
#include <strata/support/check.hpp>
#include <strata/support/source_site.hpp>
#include <strata/tensor/dtype.hpp>
#include <strata/tensor/half.hpp>  // dtype_of<Half>, dtype_of<BFloat16>

namespace strata::collective {

namespace detail {
/// An allgather's output holds `ranks` inputs; a reduce-scatter's input, `ranks` outputs.
inline void check_allgather_sizes(std::size_t in, std::size_t out, int ranks) {
  STRATA_CHECK_EQ(out, in * static_cast<std::size_t>(ranks), "allgather: output must hold size() inputs");
}
inline void check_reduce_scatter_sizes(std::size_t in, std::size_t out, int ranks) {
  STRATA_CHECK_EQ(in, out * static_cast<std::size_t>(ranks), "reduce_scatter: input must hold size() outputs");
}
}  // namespace detail

template <class Policy>
class TypedFrontEnd {
 public:
  using Here = SourceSite;

  template <class T>
  void allreduce(std::span<T> x, ReduceOp op, Here at = Here::current()) {
    const FlightRecorder::CallSite site(at);
    self().before_blocking();
    self().allreduce_raw(x.data(), x.data(), x.size(), dtype_v<T>, op);
  }
  template <class T>
  void allreduce(std::span<const T> in, std::span<T> out, ReduceOp op, Here at = Here::current()) {
    STRATA_CHECK_EQ(in.size(), out.size(), "allreduce: input and output sizes differ");
    const FlightRecorder::CallSite site(at);
    self().before_blocking();
    self().allreduce_raw(in.data(), out.data(), in.size(), dtype_v<T>, op);
  }
  template <class T>
  void allreduce(std::span<T> in, std::span<T> out, ReduceOp op, Here at = Here::current()) {
    allreduce(std::span<const T>(in), out, op, at);
  }
  template <class T>
  void broadcast(std::span<T> x, int root, Here at = Here::current()) {
    STRATA_CHECK(root >= 0 && root < self().size(), "broadcast: root ", root, " outside [0, ", self().size(), ")");
    const FlightRecorder::CallSite site(at);
    self().before_blocking();
    self().broadcast_raw(x.data(), x.size(), dtype_v<T>, root);
  }
  template <class T>
  void allgather(std::span<const T> in, std::span<T> out, Here at = Here::current()) {
    detail::check_allgather_sizes(in.size(), out.size(), self().size());
    const FlightRecorder::CallSite site(at);
    self().before_blocking();
    self().allgather_raw(in.data(), out.data(), in.size(), dtype_v<T>);
  }
  template <class T>
  void allgather(std::span<T> in, std::span<T> out, Here at = Here::current()) {
    allgather(std::span<const T>(in), out, at);
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op, Here at = Here::current()) {
    detail::check_reduce_scatter_sizes(in.size(), out.size(), self().size());
    const FlightRecorder::CallSite site(at);
    self().before_blocking();
    self().reduce_scatter_raw(in.data(), out.data(), out.size(), dtype_v<T>, op);
  }
  template <class T>
  void reduce_scatter(std::span<T> in, std::span<T> out, ReduceOp op, Here at = Here::current()) {
    reduce_scatter(std::span<const T>(in), out, op, at);
  }

 private:
  Policy& self() noexcept { return static_cast<Policy&>(*this); }
};

}  // namespace strata::collective

/// \file
/// TypedFrontEnd<Policy>: the typed span overloads every collective policy offers, written
/// once. They check sizes, let the policy finish its pending asynchronous work
/// (`before_blocking()`), then call the policy's type-erased core:
///   allreduce_raw(in, out, count, dtype, op)       in == out means in place
///   broadcast_raw(x, count, dtype, root)
///   allgather_raw(in, out, count, dtype)            count = elements per rank
///   reduce_scatter_raw(in, out, count, dtype, op)   count = elements per rank
#pragma once

#include <span>
#include <type_traits>

#include <strata/collective/reduce_op.hpp>
#include <strata/support/check.hpp>
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
  template <class T>
  void allreduce(std::span<T> x, ReduceOp op) {
    self().before_blocking();
    self().allreduce_raw(x.data(), x.data(), x.size(), dtype_v<T>, op);
  }
  template <class T>
  void allreduce(std::span<const T> in, std::span<T> out, ReduceOp op) {
    STRATA_CHECK_EQ(in.size(), out.size(), "allreduce: input and output sizes differ");
    self().before_blocking();
    self().allreduce_raw(in.data(), out.data(), in.size(), dtype_v<T>, op);
  }
  template <class T>
  void allreduce(std::span<T> in, std::span<T> out, ReduceOp op) {
    allreduce(std::span<const T>(in), out, op);
  }
  template <class T>
  void broadcast(std::span<T> x, int root) {
    STRATA_CHECK(root >= 0 && root < self().size(), "broadcast: root ", root, " outside [0, ", self().size(), ")");
    self().before_blocking();
    self().broadcast_raw(x.data(), x.size(), dtype_v<T>, root);
  }
  template <class T>
  void allgather(std::span<const T> in, std::span<T> out) {
    detail::check_allgather_sizes(in.size(), out.size(), self().size());
    self().before_blocking();
    self().allgather_raw(in.data(), out.data(), in.size(), dtype_v<T>);
  }
  template <class T>
  void allgather(std::span<T> in, std::span<T> out) {
    allgather(std::span<const T>(in), out);
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {
    detail::check_reduce_scatter_sizes(in.size(), out.size(), self().size());
    self().before_blocking();
    self().reduce_scatter_raw(in.data(), out.data(), out.size(), dtype_v<T>, op);
  }
  template <class T>
  void reduce_scatter(std::span<T> in, std::span<T> out, ReduceOp op) {
    reduce_scatter(std::span<const T>(in), out, op);
  }

 private:
  Policy& self() noexcept { return static_cast<Policy&>(*this); }
};

}  // namespace strata::collective

/// \file
/// PerReplica<T>: one value per local replica, in replica order (tf.distribute's PerReplica).
/// Held inline, so returning one from a step allocates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include <strata/collective/reduce_op.hpp>
#include <strata/support/check.hpp>
#include <strata/support/replica_thread.hpp>  // kMaxLocalReplicas
#include <strata/tensor/factory.hpp>         // full
#include <strata/tensor/tensor.hpp>

namespace strata {

/// One value per local replica.
template <class T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::size_t n) : n_(n) {
    STRATA_CHECK(n <= kMaxLocalReplicas, "at most ", kMaxLocalReplicas, " local replicas, got ", n);
  }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return v_[i]; }
  const T& operator[](std::size_t i) const noexcept { return v_[i]; }
  T* begin() noexcept { return v_.data(); }
  T* end() noexcept { return v_.data() + n_; }
  const T* begin() const noexcept { return v_.data(); }
  const T* end() const noexcept { return v_.data() + n_; }

 private:
  std::array<T, kMaxLocalReplicas> v_{};
  std::size_t n_ = 0;
};

/// This process's values of a PerReplica (tf's experimental_local_results).
template <class T>
const PerReplica<T>& local_results(const PerReplica<T>& v) noexcept {
  return v;
}

namespace detail {
template <class T>
inline constexpr bool is_per_replica_v = false;
template <class T>
inline constexpr bool is_per_replica_v<PerReplica<T>> = true;
template <class T>
inline constexpr bool dependent_false_v = false;

/// Instantiated by a strategy's reduce() or gather() of something that is not a PerReplica —
/// typically a replica's own tensor or loss, inside the replica function.
template <class V>
void reject_replica_value() {
  static_assert(dependent_false_v<V>,
                "strategy.reduce() and gather() take the PerReplica value that run() returns; inside a replica "
                "function, reduce a replica's own value with ctx.all_reduce(op, tensor)");
}

/// Instantiated by a strategy's reduce() or gather() of a PerReplica whose values have no
/// reduction: neither tensors nor numbers.
template <class T>
void reject_value_type() {
  static_assert(dependent_false_v<T>,
                "strategy.reduce() and gather() take a PerReplica<Tensor> or a PerReplica of a number (int64_t, "
                "double, float, ...); return one of those from the replica function (a flag as an int)");
}

/// What a rejected reduce() or gather() returns: it stands for whatever the caller does with
/// the result (`.item()`, a double, a Tensor), so that the static_assert above is the only
/// error the compiler reports, not the first of a cascade.
struct RejectedValue {
  double item() const noexcept { return 0; }
  template <class T>
  operator T() const {  // NOLINT: converts to what the caller expected
    return T{};
  }
};

/// The values a PerReplica's reduce() and gather() take: tensors and numbers but bool.
template <class T>
inline constexpr bool reducible_value_v =
    std::is_same_v<T, Tensor> || (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
}  // namespace detail

/// Anything but a PerReplica: the argument of a reduce() or gather() that cannot compile.
template <class V>
concept ReplicaValue = !detail::is_per_replica_v<std::remove_cvref_t<V>>;

namespace detail {
/// Part of every strategy's reduce() and gather() overload sets (a base, brought in with
/// `using`): a replica's own value, not the PerReplica run() returns, and a PerReplica of
/// values with no reduction, are compile-time errors — one message each.
struct RejectsReplicaValues {
  template <ReplicaValue V>
  RejectedValue reduce(ReduceOp, const V&) const {
    reject_replica_value<V>();
    return {};
  }
  template <ReplicaValue V>
  RejectedValue gather(const V&) const {
    reject_replica_value<V>();
    return {};
  }
  template <class T>
    requires(!reducible_value_v<T>)
  RejectedValue reduce(ReduceOp, const PerReplica<T>&) const {
    reject_value_type<T>();
    return {};
  }
  template <class T>
    requires(!reducible_value_v<T>)
  RejectedValue gather(const PerReplica<T>&) const {
    reject_value_type<T>();
    return {};
  }
};

/// Part of every strategy's reduce() and gather() overload sets (a CRTP base, brought in with
/// `using`): a PerReplica of numbers other than double (a count as int64_t, a flag as int)
/// reduces through the strategy's double reduction, exactly for integers up to 2^53
/// (ReduceOp::Mean of integers rounds toward zero); gather() of any numbers gives every
/// replica's value, across every process, in replica order.
template <class Derived>
struct TakesArithmeticValues {
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, double> && !std::is_same_v<T, bool>)
  T reduce(ReduceOp op, const PerReplica<T>& v) {
    PerReplica<double> d(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = static_cast<double>(v[i]);
    return static_cast<T>(static_cast<Derived&>(*this).reduce(op, d));
  }
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
  std::vector<T> gather(const PerReplica<T>& v) {
    PerReplica<Tensor> t(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) t[i] = full({1}, static_cast<double>(v[i]), DType::f64);
    const Tensor all = static_cast<Derived&>(*this).gather(t).contiguous();
    std::vector<T> out(static_cast<std::size_t>(all.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(all.data<double>()[i]);
    return out;
  }
};
}  // namespace detail

}  // namespace strata

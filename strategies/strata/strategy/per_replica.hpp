/// \file
/// PerReplica<T>: one value per local replica, in replica order (tf.distribute's PerReplica).
/// Held inline, so returning one from a step allocates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include <strata/collective/reduce_op.hpp>
#include <strata/support/check.hpp>

namespace strata {

/// The most replicas one process runs (one per local device or thread).
inline constexpr std::size_t kMaxLocalReplicas = 16;

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
}  // namespace detail

/// Anything but a PerReplica: the argument of a reduce() or gather() that cannot compile.
template <class V>
concept ReplicaValue = !detail::is_per_replica_v<std::remove_cvref_t<V>>;

namespace detail {
/// Part of every strategy's reduce() and gather() overload sets (a base, brought in with
/// `using`): a replica's own value, not the PerReplica run() returns, is a compile-time error.
struct RejectsReplicaValues {
  template <ReplicaValue V>
  void reduce(ReduceOp, const V&) const {
    reject_replica_value<V>();
  }
  template <ReplicaValue V>
  void gather(const V&) const {
    reject_replica_value<V>();
  }
};

/// Part of every strategy's reduce() overload set (a CRTP base, brought in with `using`): a
/// PerReplica of any other arithmetic type (a count as int64_t, a flag as int) reduces through
/// the strategy's double reduction, exactly for integers up to 2^53; ReduceOp::Mean of
/// integers rounds toward zero.
template <class Derived>
struct ReducesArithmeticValues {
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, double> && !std::is_same_v<T, bool>)
  T reduce(ReduceOp op, const PerReplica<T>& v) {
    PerReplica<double> d(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = static_cast<double>(v[i]);
    return static_cast<T>(static_cast<Derived&>(*this).reduce(op, d));
  }
};
}  // namespace detail

}  // namespace strata

/// \file
/// PerReplica<T>: one value per local replica, in replica order (tf.distribute's PerReplica).
/// Held inline, so returning one from a step allocates nothing.
#pragma once

#include <array>
#include <cstddef>

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

}  // namespace strata

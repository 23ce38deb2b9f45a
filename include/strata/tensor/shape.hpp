/// \file
/// Shape: up to kMaxDims extents held inline, so creating a tensor never allocates for its
/// shape. Also broadcasting of two shapes (NumPy rules).
#pragma once

#include <algorithm>  // std::equal
#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>

#include <strata/kernels/math/limits.hpp>  // kMaxDims
#include <strata/support/check.hpp>  // STRATA_CHECK

namespace strata {

/// Extents of a tensor, outermost first.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(std::span(dims.begin(), dims.size())); }
  explicit Shape(std::span<const std::int64_t> dims) { assign(dims); }

  int ndim() const noexcept { return n_; }
  std::int64_t operator[](int i) const noexcept { return d_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) noexcept { return d_[static_cast<std::size_t>(i)]; }
  /// Extent of axis `i`; negative `i` counts from the end.
  std::int64_t dim(int i) const {
    const int a = normalize_axis(i);
    return d_[static_cast<std::size_t>(a)];
  }
  /// Maps a possibly negative axis to [0, ndim).
  int normalize_axis(int i) const {
    const int a = i < 0 ? i + n_ : i;
    STRATA_CHECK(a >= 0 && a < n_, "axis ", i, " out of range for a ", n_, "-d shape");
    return a;
  }
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[static_cast<std::size_t>(i)];
    return n;
  }
  const std::int64_t* begin() const noexcept { return d_.data(); }
  const std::int64_t* end() const noexcept { return d_.data() + n_; }
  std::span<const std::int64_t> dims() const noexcept { return {d_.data(), static_cast<std::size_t>(n_)}; }

  void push_back(std::int64_t e) {
    STRATA_CHECK(n_ < kMaxDims, "a tensor has at most ", kMaxDims, " dimensions");
    d_[static_cast<std::size_t>(n_++)] = e;
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void assign(std::span<const std::int64_t> dims) {
    STRATA_CHECK(dims.size() <= static_cast<std::size_t>(kMaxDims), "a tensor has at most ", kMaxDims,
                 " dimensions, got ", dims.size());
    n_ = static_cast<int>(dims.size());
    for (int i = 0; i < n_; ++i) {
      STRATA_CHECK(dims[static_cast<std::size_t>(i)] >= 0, "negative extent ", dims[static_cast<std::size_t>(i)]);
      d_[static_cast<std::size_t>(i)] = dims[static_cast<std::size_t>(i)];
    }
  }

  std::array<std::int64_t, kMaxDims> d_{};
  int n_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int i = 0; i < s.ndim(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

/// Row-major (C-order) strides, in elements, of a contiguous tensor of shape `s`.
inline Shape contiguous_strides(const Shape& s) {
  Shape st = s;
  std::int64_t acc = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

/// The NumPy broadcast of `a` and `b`; throws naming both shapes when they do not broadcast.
inline Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const std::int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    STRATA_CHECK(ea == eb || ea == 1 || eb == 1, "shapes ", a, " and ", b, " do not broadcast");
    out.push_back(ea == 1 ? eb : ea);
  }
  return out;
}

}  // namespace strata

/// \file
/// Tensor factories: zeros, ones, full, from values, seeded random.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/tensor/random.hpp>  // Generator
#include <strata/tensor/tensor.hpp>  // Tensor

namespace strata {

inline Tensor full(const Shape& shape, double value, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  t.fill_(value);
  return t;
}
inline Tensor zeros(const Shape& shape, DType dtype = DType::f32) { return full(shape, 0.0, dtype); }
inline Tensor ones(const Shape& shape, DType dtype = DType::f32) { return full(shape, 1.0, dtype); }

/// A tensor holding `values` (row-major), converted to `dtype`.
template <class T>
Tensor from_vector(const Shape& shape, const std::vector<T>& values, DType dtype = dtype_v<T>) {
  STRATA_CHECK_EQ(static_cast<std::int64_t>(values.size()), shape.numel(), "from_vector: value count vs shape ", shape);
  Tensor t = Tensor::empty(shape, dtype);
  detail::visit_dtype(dtype, [&](auto tag) {
    using D = decltype(tag);
    D* p = static_cast<D*>(t.raw_data());
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<D>(values[i]);
  });
  return t;
}

/// Uniform in [lo, hi).
inline Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  detail::visit_floating(dtype, "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(gen.uniform(lo, hi));
  });
  return t;
}

/// Normal with mean `mean` and standard deviation `stddev`.
inline Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  detail::visit_floating(dtype, "normal", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(mean + stddev * gen.normal());
  });
  return t;
}

/// A copy of `t` converted to `dtype` (no gradient tracking).
inline Tensor to_dtype(const Tensor& t, DType dtype) {
  Tensor src = t.contiguous();
  Tensor out = Tensor::empty(t.shape(), dtype);
  detail::visit_dtype(t.dtype(), [&](auto stag) {
    using S = decltype(stag);
    detail::visit_dtype(dtype, [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = static_cast<const S*>(src.raw_data());
      D* d = static_cast<D*>(out.raw_data());
      for (std::int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<D>(s[i]);
    });
  });
  return out;
}

}  // namespace strata

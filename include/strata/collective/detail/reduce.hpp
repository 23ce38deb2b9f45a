/// \file
/// Type-erased reductions for the collective algorithms: dst op= src over `count` elements of
/// a runtime dtype. fp16/bf16 are accumulated in float32 by the callers (see Accumulator).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <strata/collective/reduce_op.hpp>
#include <strata/config.hpp>               // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked
#include <strata/support/check.hpp>
#include <strata/tensor/dtype.hpp>
#include <strata/tensor/half.hpp>

namespace strata::collective::detail {

/// acc[i] = acc[i] op src[i]; Mean accumulates as Sum (the caller divides once at the end).
template <class T>
void combine(ReduceOp op, std::size_t n, T* STRATA_RESTRICT acc, const T* STRATA_RESTRICT src) {
  const auto m = static_cast<std::int64_t>(n);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: kernels::cpu::for_each_blocked(m, [&](std::int64_t i) { acc[i] += src[i]; }); break;
    case ReduceOp::Prod: kernels::cpu::for_each_blocked(m, [&](std::int64_t i) { acc[i] *= src[i]; }); break;
    case ReduceOp::Min:
      kernels::cpu::for_each_blocked(m, [&](std::int64_t i) { acc[i] = src[i] < acc[i] ? src[i] : acc[i]; });
      break;
    case ReduceOp::Max:
      kernels::cpu::for_each_blocked(m, [&](std::int64_t i) { acc[i] = src[i] > acc[i] ? src[i] : acc[i]; });
      break;
  }
}

/// acc[i] /= divisor (Mean's last step; integer types divide with truncation).
template <class T>
void divide(std::size_t n, T* acc, int divisor) {
  const T d = static_cast<T>(divisor);
  for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / d);
}

/// Calls f(Storage{}, Accum{}): the element type in memory and the type reductions run in.
template <class F>
decltype(auto) visit_collective_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{}, float{});
    case DType::f64: return f(double{}, double{});
    case DType::i32: return f(std::int32_t{}, std::int32_t{});
    case DType::i64: return f(std::int64_t{}, std::int64_t{});
    case DType::f16: return f(Half{}, float{});
    case DType::bf16: return f(BFloat16{}, float{});
    default: break;
  }
  STRATA_THROW(::strata::invalid_argument, "strata.collective", "collectives do not reduce ", name_of(t), " buffers");
}

/// Converting loads and stores between the storage and accumulation types.
template <class S, class A>
inline void load(std::size_t n, const S* src, A* dst) {
  if constexpr (std::is_same_v<S, A>)
    std::copy_n(src, n, dst);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<A>(src[i]);
}
template <class A, class S>
inline void store(std::size_t n, const A* src, S* dst) {
  if constexpr (std::is_same_v<S, A>)
    std::copy_n(src, n, dst);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = S(src[i]);
}

/// Where share r of `count` elements split over n ranks begins: multiples of 16 elements, so
/// shares start on cache lines.
inline std::size_t share_begin(std::size_t count, int r, int n) {
  if (r >= n) return count;
  const std::size_t b = count * static_cast<std::size_t>(r) / static_cast<std::size_t>(n);
  return std::min(count, b / 16 * 16);
}

/// Reduces elements [lo, hi) of every rank's input (send(k), k < n) and writes the result to
/// every non-null recv(k), in blocks that stay in L1: the shared-memory all-reduce's step, where
/// each rank takes one range and reads every rank's buffer directly.
template <class S, class A, class Send, class Recv>
void reduce_across(std::size_t lo, std::size_t hi, ReduceOp op, Send send, Recv recv, int n) {
  constexpr std::size_t kBlock = 2048;
  thread_local std::vector<A> acc, tmp;
  if (acc.size() < kBlock) acc.resize(kBlock), tmp.resize(kBlock);
  for (std::size_t b = lo; b < hi; b += kBlock) {
    const std::size_t m = std::min(kBlock, hi - b);
    load<S, A>(m, send(0) + b, acc.data());
    for (int k = 1; k < n; ++k) {
      if constexpr (std::is_same_v<S, A>) {
        combine<A>(op, m, acc.data(), send(k) + b);
      } else {
        load<S, A>(m, send(k) + b, tmp.data());
        combine<A>(op, m, acc.data(), tmp.data());
      }
    }
    if (op == ReduceOp::Mean) divide<A>(m, acc.data(), n);
    for (int k = 0; k < n; ++k)
      if (S* dst = recv(k)) store<A, S>(m, acc.data(), dst + b);
  }
}

/// A reduce-scatter of 16-bit floats (`dtype` f16 or bf16) through float32, accumulated in
/// float32 and rounded once: converts all `size` shares of `in`, lets `reduce32(full, part)`
/// reduce-scatter them as float32, and rounds this rank's share into `out`.
template <class F>
void reduce_scatter_through_float32(const void* in, void* out, std::size_t count, DType dtype, int size, F&& reduce32) {
  auto run = [&](auto s) {
    using S = decltype(s);
    const std::size_t all = count * static_cast<std::size_t>(size);
    std::vector<float> full(all), part(count);
    load<S, float>(all, static_cast<const S*>(in), full.data());
    reduce32(full.data(), part.data());
    store<float, S>(count, part.data(), static_cast<S*>(out));
  };
  STRATA_CHECK(dtype == DType::f16 || dtype == DType::bf16, "reduce_scatter_through_float32 of ", name_of(dtype));
  if (dtype == DType::f16)
    run(Half{});
  else
    run(BFloat16{});
}

/// acc[i] = round16(float(acc[i]) + float(src[i])): one hop of an all-reduce whose elements
/// travel as 16-bit floats (S = Half or BFloat16) and add in float32.
template <class S>
void add16(std::size_t n, S* STRATA_RESTRICT acc, const S* STRATA_RESTRICT src) {
  for (std::size_t i = 0; i < n; ++i) acc[i] = S(static_cast<float>(acc[i]) + static_cast<float>(src[i]));
}

}  // namespace strata::collective::detail

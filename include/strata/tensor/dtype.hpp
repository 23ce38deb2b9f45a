/// \file
/// Element types. float32 and float64 carry arithmetic today; fp16/bf16 exist as tags for
/// gradient compression on the wire; int32/int64/uint8 hold labels, indices and raw bytes.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>
#include <ostream>

namespace strata {

/// The element type of a tensor.
enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

/// Bytes per element of `t`.
constexpr std::size_t size_of(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

/// The name of `t`, as written in error messages.
constexpr const char* name_of(DType t) noexcept {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

/// True for the types autograd differentiates through.
constexpr bool is_floating(DType t) noexcept { return t == DType::f32 || t == DType::f64; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << name_of(t); }

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };

/// The DType tag of the C++ type T.
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace strata

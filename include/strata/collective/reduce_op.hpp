/// \file
/// The reductions collectives and strategies apply across replicas.
#pragma once

#include <cstdint>
#include <ostream>

namespace strata {

/// How values from several replicas combine.
enum class ReduceOp : std::uint8_t { Sum, Mean, Min, Max, Prod };

constexpr const char* name_of(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Prod: return "prod";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, ReduceOp op) { return os << name_of(op); }

}  // namespace strata

// A vector of class labels as the int64 tensor the losses and metrics take.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/tensor/factory.hpp>

inline strata::Tensor labels_of(const std::vector<std::int64_t>& v) {
  return strata::from_vector<std::int64_t>({static_cast<std::int64_t>(v.size())}, v);
}

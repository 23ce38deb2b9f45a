/// \file
/// Where a tensor's storage lives.
#pragma once

#include <cstdint>
#include <ostream>

namespace strata {

enum class DeviceKind : std::uint8_t { cpu, cuda };

/// A device: its kind and index ("cpu", "cuda:1").
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() noexcept { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i) noexcept { return {DeviceKind::cuda, i}; }
  friend constexpr bool operator==(Device, Device) = default;
};

inline std::ostream& operator<<(std::ostream& os, Device d) {
  if (d.kind == DeviceKind::cpu) return os << "cpu";
  return os << "cuda:" << d.index;
}

}  // namespace strata

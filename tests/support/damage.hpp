// Damages a checkpoint file as a failing disk would: one byte of its last tensor's data
// flipped, so every earlier tensor still reads and verifies and only the last one fails.
#pragma once

#include <filesystem>
#include <fstream>

#include <strata/checkpoint/file.hpp>

namespace support {

inline void damage_last_tensor(const std::filesystem::path& path) {
  std::streamoff at = 0;
  {
    const strata::checkpoint::Reader r(path);
    STRATA_CHECK(!r.entries().empty() && r.entries().back().bytes > 0, "damage_last_tensor: '", path.string(),
                 "' has no last tensor with bytes");
    at = static_cast<std::streamoff>(r.entries().back().offset);
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char was = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(was ^ 0x5a));
}

}  // namespace support

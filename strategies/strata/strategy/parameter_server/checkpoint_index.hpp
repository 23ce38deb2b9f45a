/// \file
/// The parameter-server checkpoint's files: each server's shard at a step
/// (`DIR/ps-shard-SERVER-STEP.strata`), the CRC-32C of every shard that the chief's index
/// records, a shard opened and checked against it, and the shards of steps no index keeps
/// removed. docs/checkpoints.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::ps {

/// The shard file of server `server` (its index among the servers) at step `step`.
inline std::filesystem::path shard_path(const std::filesystem::path& dir, int server, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ps-shard-%03d-%012lld.strata", server, static_cast<long long>(step));
  return dir / name;
}

/// The shard CRCs index `r` records, one per server of a job of `servers` servers.
inline Tensor shard_crcs(const checkpoint::Reader& r, int servers) {
  STRATA_REQUIRE(r.find("ps.shard_crc") != nullptr, invalid_argument, "strata.checkpoint.mismatch", "'", r.name(),
                 "' records no parameter-server shards: it was written by another strategy");
  Tensor crcs = r.read("ps.shard_crc");
  STRATA_REQUIRE(crcs.numel() == servers, invalid_argument, "strata.checkpoint.mismatch", "'", r.name(),
                 "' was written with ",
                 crcs.numel(), " servers, this job has ", servers);
  return crcs;
}

/// Server `k`'s shard of index `r`, opened and checked against the CRC-32C the index
/// recorded (combined from the shard's sections: its tensors are checked as they are read,
/// or all at once by verify()).
inline checkpoint::Reader open_shard(const checkpoint::Reader& r, const std::filesystem::path& dir, std::int64_t step,
                                     int k, int servers) {
  const Tensor crcs = shard_crcs(r, servers);
  const auto path = shard_path(dir, k, step);
  checkpoint::Reader shard(path);
  const auto want = static_cast<std::uint32_t>(crcs.data<std::int64_t>()[k]);
  const std::uint32_t got = shard.file_crc();
  if (got != want)
    STRATA_THROW(checksum_error, "strata.checkpoint.checksum", "shard '", path.string(), "' is not the one '",
                 r.name(), "' recorded (CRC-32C ", checkpoint::Reader::hex(got), ", expected ", checkpoint::Reader::hex(want), ")");
  return shard;
}

/// Removes the shards in `dir` of the steps whose index is gone (`kept`: the steps still indexed).
inline void prune_shards(const std::filesystem::path& dir, const std::vector<std::int64_t>& kept) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    long long step = -1;
    int server = -1;
    if (std::sscanf(n.c_str(), "ps-shard-%d-%lld.strata", &server, &step) != 2) continue;
    if (std::find(kept.begin(), kept.end(), step) == kept.end()) std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace strata::ps

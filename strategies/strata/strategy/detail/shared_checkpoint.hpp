/// \file
/// The chief's checkpoint for every process of a strategy across processes, with no copy of
/// the file in any process's memory. The chief sends its header, its index and its small
/// tensors in one message (share_from_chief); each larger tensor then goes from the chief's
/// file into every process's destination (broadcast_from_chief) as it is read. So every
/// process must read the same large tensors in the same order: restore_training_state does,
/// for replicas of one model.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/checkpoint/file.hpp>

namespace strata::detail {

/// A strategy across processes that can share the chief's bytes: a message of any size, and
/// a buffer of a size every process knows.
template <class S>
concept SharesChiefTensors = requires(S& s, std::vector<unsigned char>& bytes, void* data, std::size_t n) {
  s.share_from_chief(bytes);
  s.broadcast_from_chief(data, n);
};

/// Tensors up to this size travel with the index; larger ones one by one, when read.
inline constexpr std::uint64_t kSharedWithIndex = std::uint64_t{64} << 10;
/// The largest single broadcast of a large tensor's bytes.
inline constexpr std::size_t kSharedPiece = std::size_t{64} << 20;

/// The bytes of the file that travel with the index: its header, its index, its small tensors.
struct SharedRange {
  std::uint64_t offset = 0, bytes = 0, at = 0;  // `at`: where the message holds them
};

template <class S>
void broadcast_pieces(S& s, void* data, std::size_t n) {
  for (std::size_t at = 0; at < n; at += kSharedPiece)
    s.broadcast_from_chief(static_cast<unsigned char*>(data) + at, std::min(kSharedPiece, n - at));
}

inline const SharedRange* shared_range_of(const std::vector<SharedRange>& ranges, std::uint64_t offset,
                                          std::size_t n) {
  for (const SharedRange& r : ranges)
    if (offset >= r.offset && offset - r.offset <= r.bytes && n <= r.bytes - (offset - r.offset)) return &r;
  return nullptr;
}

/// The first word of a message that carries the chief's error instead of a checkpoint.
inline constexpr std::uint64_t kChiefError = ~std::uint64_t{0};

/// Every process's reader of the checkpoint the chief opened (`chief`, verified; none: no
/// checkpoint, and every process gets none). `chief_error`, when the chief gives one (no
/// checkpoint it found reads): every process throws it instead. Collective: every process
/// calls it.
template <SharesChiefTensors S>
std::optional<checkpoint::Reader> share_checkpoint(S& s, std::optional<checkpoint::Reader> chief,
                                                   const std::string& chief_error = {}) {
  // The message: size u64, name length u64, name, range count u64, (offset, bytes) per range,
  // then the ranges' bytes. Empty: no checkpoint. kChiefError, then the error's text.
  auto message = std::make_shared<std::vector<unsigned char>>();
  auto put = [&](std::uint64_t v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    message->insert(message->end(), p, p + sizeof v);
  };
  std::vector<SharedRange> ranges;
  if (s.is_chief() && !chief_error.empty()) {
    put(kChiefError);
    message->insert(message->end(), chief_error.begin(), chief_error.end());
  } else if (s.is_chief() && chief) {
    const checkpoint::Reader& c = *chief;
    ranges.push_back({0, c.header_bytes().size(), 0});
    for (const checkpoint::Entry& e : c.entries())
      if (e.bytes > 0 && e.bytes <= kSharedWithIndex) ranges.push_back({e.offset, e.bytes, 0});
    ranges.push_back({c.index_offset(), c.index_bytes().size(), 0});
    put(c.size());
    put(c.name().size());
    message->insert(message->end(), c.name().begin(), c.name().end());
    put(ranges.size());
    for (const SharedRange& r : ranges) {
      put(r.offset);
      put(r.bytes);
    }
    for (SharedRange& r : ranges) {
      r.at = message->size();
      message->resize(message->size() + r.bytes);
      c.read_range(r.offset, message->data() + r.at, r.bytes);
    }
  }
  s.share_from_chief(*message);
  if (message->empty()) return std::nullopt;
  if (std::uint64_t first = 0; message->size() >= sizeof first &&
                               (std::memcpy(&first, message->data(), sizeof first), first == kChiefError))
    STRATA_THROW(data_error, "strata.checkpoint.unreadable",
                 std::string(reinterpret_cast<const char*>(message->data()) + sizeof first, message->size() - sizeof first));

  if (s.is_chief()) {
    checkpoint::Reader c = std::move(*chief);
    std::string name = c.name();
    const std::uint64_t size = c.size();
    auto source = [&s, c = std::move(c), ranges](std::uint64_t offset, void* out, std::size_t n) {
      c.read_range(offset, out, n);
      if (!shared_range_of(ranges, offset, n)) broadcast_pieces(s, out, n);
    };
    return checkpoint::Reader(std::move(name), size, std::move(source), /*verified=*/true);
  }
  // A receiving process: every field is checked against the message's length.
  std::size_t at = 0;
  auto get = [&]() {
    STRATA_CHECK(message->size() - at >= sizeof(std::uint64_t), "the chief's checkpoint message is cut short");
    std::uint64_t v;
    std::memcpy(&v, message->data() + at, sizeof v);
    at += sizeof v;
    return v;
  };
  const std::uint64_t size = get(), name_bytes = get();
  STRATA_CHECK(name_bytes <= message->size() - at, "the chief's checkpoint message is cut short");
  std::string name(reinterpret_cast<const char*>(message->data() + at), name_bytes);
  at += name_bytes;
  const std::uint64_t count = get();
  STRATA_CHECK(count <= (message->size() - at) / 16, "the chief's checkpoint message is cut short");
  ranges.resize(count);
  for (SharedRange& r : ranges) {
    r.offset = get();
    r.bytes = get();
  }
  for (SharedRange& r : ranges) {
    STRATA_CHECK(r.bytes <= message->size() - at, "the chief's checkpoint message is cut short");
    r.at = at;
    at += r.bytes;
  }
  auto source = [&s, message, ranges](std::uint64_t offset, void* out, std::size_t n) {
    if (const SharedRange* r = shared_range_of(ranges, offset, n))
      std::memcpy(out, message->data() + r->at + (offset - r->offset), n);
    else
      broadcast_pieces(s, out, n);
  };
  return checkpoint::Reader(std::move(name), size, std::move(source), /*verified=*/true);
}

}  // namespace strata::detail

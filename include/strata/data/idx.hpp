/// \file
/// Reader for IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
/// Every failure is a strata::io_error or strata::data_error that names the file and the
/// problem; no declared size is trusted before it is checked against the bytes present.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <strata/config.hpp>  // STRATA_HAS_ZLIB
#include <strata/support/check.hpp>

#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif

namespace strata::data {

/// An unsigned-byte IDX array: its dimensions and its elements in row-major order.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> bytes;
};

namespace detail {

[[noreturn]] inline void idx_fail(const std::string& path, const std::string& what) {
  STRATA_THROW(::strata::data_error, "strata.data", path, ": ", what);
}

/// The whole file, decompressed if it starts with the gzip magic.
inline std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) STRATA_THROW(::strata::io_error, "strata.data", path, ": cannot open (missing file or no permission)");
  std::vector<std::uint8_t> raw;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    raw.insert(raw.end(), buf, buf + n);
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) STRATA_THROW(::strata::io_error, "strata.data", path, ": read error (is it a directory?)");
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
#if STRATA_HAS_ZLIB
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 32) != Z_OK) idx_fail(path, "cannot initialise gzip decompression");
    std::vector<std::uint8_t> out;
    zs.next_in = raw.data();
    zs.avail_in = static_cast<uInt>(raw.size());
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      zs.next_out = buf;
      zs.avail_out = sizeof buf;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        inflateEnd(&zs);
        idx_fail(path, rc == Z_BUF_ERROR ? "truncated gzip stream" : "corrupt gzip stream");
      }
      out.insert(out.end(), buf, buf + (sizeof buf - zs.avail_out));
      if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
        inflateEnd(&zs);
        idx_fail(path, "truncated gzip stream");
      }
    }
    inflateEnd(&zs);
    return out;
#else
    idx_fail(path, "is gzip-compressed, but strata was built without zlib (Meson: -Dzlib=enabled; by hand: "
                   "-DSTRATA_HAS_ZLIB=1 -lz); decompress it first");
#endif
  }
  return raw;
}

}  // namespace detail

/// Reads an unsigned-byte IDX file (magic 0x00 0x00 0x08 ndim), checking that the data
/// exactly fills the declared dimensions.
inline IdxArray read_idx(const std::string& path) {
  std::vector<std::uint8_t> b = detail::read_file_bytes(path);
  if (b.empty()) detail::idx_fail(path, "empty file");
  if (b.size() < 4) detail::idx_fail(path, "truncated header (" + std::to_string(b.size()) + " bytes)");
  if (b[0] != 0 || b[1] != 0) detail::idx_fail(path, "bad magic: not an IDX file");
  if (b[2] != 0x08) detail::idx_fail(path, "unsupported element type 0x" + std::to_string(b[2]) + " (only unsigned bytes, 0x08)");
  const int nd = b[3];
  if (nd < 1 || nd > 4) detail::idx_fail(path, "bad magic: " + std::to_string(nd) + " dimensions");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(nd);
  if (b.size() < header) detail::idx_fail(path, "truncated header");
  IdxArray a;
  std::uint64_t count = 1;
  for (int i = 0; i < nd; ++i) {
    const std::uint8_t* p = b.data() + 4 + 4 * i;
    const std::uint64_t d = (std::uint64_t{p[0]} << 24) | (std::uint64_t{p[1]} << 16) | (std::uint64_t{p[2]} << 8) | p[3];
    a.dims.push_back(static_cast<std::int64_t>(d));
    count *= d;
    if (count > b.size()) break;  // cannot fit; reported below without overflowing
  }
  const std::size_t have = b.size() - header;
  if (a.dims.size() != static_cast<std::size_t>(nd) || count > have)
    detail::idx_fail(path, "truncated: the header declares more elements than the " + std::to_string(have) +
                               " data bytes present");
  if (count < have)
    detail::idx_fail(path, std::to_string(have - count) + " bytes of trailing data after the declared elements");
  a.bytes.assign(b.begin() + static_cast<std::ptrdiff_t>(header), b.end());
  return a;
}

}  // namespace strata::data

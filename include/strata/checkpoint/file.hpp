/// \file
/// One checkpoint file: named tensors with a CRC-32C each, written atomically and read with
/// every declared length bounded by the bytes present. Layout (little-endian):
///
///   [0, 64)        header: "STRATACK", format_version u32, min_reader_version u32,
///                  file_bytes u64, index_offset u64, index_bytes u64, tensor count u32,
///                  zeros to byte 60, then the CRC-32C of bytes [0, 60) as u32
///   [64, index)    each tensor's bytes, back to back in index order (no gaps: every byte of
///                  the file is under some checksum)
///   [index, end)   index: per tensor u16 name length, name, u8 dtype, u8 ndim, i64 dims,
///                  u64 offset, u64 bytes, u32 CRC-32C of its bytes; then the index's CRC u32
///
/// write_checkpoint() writes a temporary file beside the target, fsyncs it, renames it over
/// the target and fsyncs the directory: a crash leaves the old file or the new one, whole.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>  // NoGradGuard
#include <strata/checkpoint/crc32c.hpp>
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::checkpoint {

static_assert(std::endian::native == std::endian::little, "strata checkpoints are little-endian");

inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::size_t kHeaderBytes = 64;
inline constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};

/// A tensor as the index records it.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

namespace detail {

/// Appends v's bytes. (resize and copy: GCC 12 at -O2 and above reported a false
/// -Warray-bounds inside vector::insert of a range here, depending on what else the unit held.)
template <class T>
void put(std::vector<unsigned char>& out, T v) {
  const std::size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

[[noreturn]] inline void io_fail(const std::string& what, const std::string& path) {
  STRATA_THROW(io_error, "strata.checkpoint", what, " '", path, "': ", std::strerror(errno));
}

inline void write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) io_fail("cannot write", path);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// The header bytes for the given sizes, with their CRC.
inline std::vector<unsigned char> header(std::uint32_t version, std::uint32_t min_reader, std::uint64_t file_bytes,
                                         std::uint64_t index_offset, std::uint64_t index_bytes, std::uint32_t count) {
  std::vector<unsigned char> h(kMagic, kMagic + 8);
  put(h, version);
  put(h, min_reader);
  put(h, file_bytes);
  put(h, index_offset);
  put(h, index_bytes);
  put(h, count);
  h.resize(60, 0);
  put(h, crc32c(h.data(), 60));
  return h;
}

}  // namespace detail

/// A checkpoint file laid out, to be written piece by piece: its header and index, and its
/// tensors (contiguous: a tensor that already is one is not copied) in file order.
struct Layout {
  std::vector<unsigned char> header, index;
  std::vector<Tensor> data;
  std::vector<std::uint32_t> crcs;  ///< each tensor's CRC-32C, as the index holds it
  std::uint64_t file_bytes = 0;
};

/// The layout of a checkpoint file holding `tensors`, in `version` (tests write other versions).
inline Layout lay_out(const NamedTensors& tensors, std::uint32_t version = kFormatVersion,
                      std::uint32_t min_reader = kFormatVersion) {
  Layout l;
  detail::put(l.index, static_cast<std::uint32_t>(tensors.size()));
  std::uint64_t offset = kHeaderBytes;
  for (const auto& [name, t0] : tensors) {
    STRATA_REQUIRE(!name.empty() && name.size() < 65536, invalid_argument, "strata.checkpoint",
                   "tensor names must be 1..65535 bytes");
    STRATA_REQUIRE(t0.defined() && t0.ndim() <= kMaxDims, invalid_argument, "strata.checkpoint", "'", name,
                   "': undefined or more than ",
                   kMaxDims, " dimensions");
    const Tensor t = (t0.device().kind == DeviceKind::cpu ? t0 : t0.to(Device::cpu())).contiguous();  // (a GPU's: its bytes)
    detail::put(l.index, static_cast<std::uint16_t>(name.size()));
    l.index.insert(l.index.end(), name.begin(), name.end());
    detail::put(l.index, static_cast<std::uint8_t>(t.dtype()));
    detail::put(l.index, static_cast<std::uint8_t>(t.ndim()));
    for (int d = 0; d < t.ndim(); ++d) detail::put(l.index, static_cast<std::int64_t>(t.dim(d)));
    detail::put(l.index, offset);
    detail::put(l.index, static_cast<std::uint64_t>(t.nbytes()));
    l.crcs.push_back(crc32c(t.nbytes() ? t.raw_data() : nullptr, t.nbytes()));
    detail::put(l.index, l.crcs.back());
    offset += t.nbytes();
    l.data.push_back(t);
  }
  detail::put(l.index, crc32c(l.index.data(), l.index.size()));
  l.file_bytes = offset + l.index.size();
  l.header = detail::header(version, min_reader, l.file_bytes, offset, l.index.size(),
                            static_cast<std::uint32_t>(tensors.size()));
  return l;
}

/// Hands the bytes of layout `l` to `sink(data, n)` in file order.
template <class Sink>
void for_each_piece(const Layout& l, Sink&& sink) {
  sink(l.header.data(), l.header.size());
  for (const Tensor& t : l.data)
    if (t.nbytes()) sink(t.raw_data(), t.nbytes());
  sink(l.index.data(), l.index.size());
}

/// The bytes of a checkpoint file holding `tensors` (contiguous copies are taken as needed),
/// in `version` (tests write other versions).
inline std::vector<unsigned char> encode(const NamedTensors& tensors, std::uint32_t version = kFormatVersion,
                                         std::uint32_t min_reader = kFormatVersion) {
  const Layout l = lay_out(tensors, version, min_reader);
  std::vector<unsigned char> out;
  out.reserve(static_cast<std::size_t>(l.file_bytes));
  for_each_piece(l, [&](const void* p, std::size_t n) {
    out.insert(out.end(), static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n);
  });
  return out;
}

/// Writes a file at `path` atomically: `write(fd, tmp)` fills a temporary file in the same
/// directory, then fsync, rename, directory fsync. Errors (ENOSPC, EACCES, ...) are io_error
/// naming the path; the file at `path` before the call is untouched unless the rename happened.
template <class Write>
void write_atomically(const std::filesystem::path& path, Write&& write) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::string tmp = (dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) detail::io_fail("cannot create", tmp);
  try {
    write(fd, tmp);
    if (::fsync(fd) != 0) detail::io_fail("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    detail::io_fail("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    detail::io_fail("cannot rename onto", path.string());
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) detail::io_fail("cannot open directory", dir.string());
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) detail::io_fail("cannot fsync directory", dir.string());
}

/// Writes `bytes` to `path` atomically (write_atomically).
inline void write_file_atomically(const std::filesystem::path& path, const std::vector<unsigned char>& bytes) {
  write_atomically(path, [&](int fd, const std::string& tmp) { detail::write_all(fd, bytes.data(), bytes.size(), tmp); });
}

/// Writes `tensors` as a checkpoint file at `path` (atomically), straight from the tensors:
/// no copy of the file is made in memory, so a shard of half the memory can be saved.
/// Returns the CRC-32C of the whole file.
inline std::uint32_t write_checkpoint(const std::filesystem::path& path, const NamedTensors& tensors) {
  const Layout l = lay_out(tensors);
  write_atomically(path, [&](int fd, const std::string& tmp) {
    for_each_piece(l, [&](const void* p, std::size_t n) { detail::write_all(fd, p, n, tmp); });
  });
  std::uint32_t crc = crc32c(l.header.data(), l.header.size());  // the tensors' bytes are not read again
  for (std::size_t i = 0; i < l.data.size(); ++i) crc = crc32c_combine(crc, l.crcs[i], l.data[i].nbytes());
  return crc32c(l.index.data(), l.index.size(), crc);
}

/// Where a Reader's bytes come from: `source(offset, out, bytes)` fills `out` with the file's
/// bytes [offset, offset + bytes) or throws. A Reader asks only for ranges inside the size it
/// was given: the header, the index, and one tensor at a time.
using ByteSource = std::function<void(std::uint64_t offset, void* out, std::size_t bytes)>;

namespace detail {
/// An open file descriptor, closed with its last holder.
struct OpenFile {
  int fd = -1;
  std::string path;
  OpenFile(int f, std::string p) : fd(f), path(std::move(p)) {}
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};
/// Reads [offset, offset + n) of `f` whole; a file that ends sooner (cut after it was opened)
/// is a truncated_error.
inline void pread_all(const OpenFile& f, void* out, std::size_t n, std::uint64_t offset) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(f.fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) io_fail("cannot read", f.path);
    if (r == 0)
      STRATA_THROW(truncated_error, "strata.checkpoint.truncated", "'", f.path, "' ends at byte ", offset,
                   ", inside a section it declares");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}
}  // namespace detail

/// A checkpoint's index, validated: every length bounded by the bytes present, every section's
/// checksum verified except the tensors' own (read() verifies each, and verify() all).
/// A Reader holds the header and the index; a tensor's bytes are fetched when it is read
/// (from the file with pread, from memory, or from any ByteSource), so reading a checkpoint
/// costs the tensors read, not the file.
class Reader {
 public:
  /// Opens the file at `path`: its header and index are read now, each tensor when read.
  explicit Reader(const std::filesystem::path& path) : name_(path.string()) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) detail::io_fail("cannot open", name_);
    auto file = std::make_shared<const detail::OpenFile>(fd, name_);
    struct stat st {};
    if (::fstat(fd, &st) != 0) detail::io_fail("cannot stat", name_);
    source_ = [file](std::uint64_t offset, void* out, std::size_t n) { detail::pread_all(*file, out, n, offset); };
    parse(static_cast<std::uint64_t>(st.st_size));
  }
  /// Reads a checkpoint held in memory (`name` labels errors).
  Reader(std::vector<unsigned char> bytes, std::string name) : name_(std::move(name)) {
    auto held = std::make_shared<const std::vector<unsigned char>>(std::move(bytes));
    source_ = [held](std::uint64_t offset, void* out, std::size_t n) {
      STRATA_CHECK(offset <= held->size() && n <= held->size() - offset, "checkpoint::Reader: a read past the end");
      if (n) std::memcpy(out, held->data() + offset, n);
    };
    parse(held->size());
  }
  /// Reads a checkpoint of `size` bytes from `source`. `verified`: its tensors' checksums are
  /// vouched for already (verify() then does nothing; read() still checks each tensor).
  Reader(std::string name, std::uint64_t size, ByteSource source, bool verified = false)
      : name_(std::move(name)), source_(std::move(source)), verified_(verified) {
    parse(size);
  }

  const std::vector<Entry>& entries() const noexcept { return entries_; }
  const std::string& name() const noexcept { return name_; }
  std::uint32_t format_version() const noexcept { return version_; }
  /// The file's size in bytes.
  std::uint64_t size() const noexcept { return size_; }
  /// The header's bytes [0, 64) and the index's [index_offset(), size()), as read.
  const std::vector<unsigned char>& header_bytes() const noexcept { return header_; }
  const std::vector<unsigned char>& index_bytes() const noexcept { return index_; }
  std::uint64_t index_offset() const noexcept { return size_ - index_.size(); }

  /// The file's bytes [offset, offset + n), unchecked (a section's checksum covers them).
  void read_range(std::uint64_t offset, void* out, std::size_t n) const {
    STRATA_REQUIRE(offset <= size_ && n <= size_ - offset, invalid_argument, "strata.checkpoint", "'", name_,
                   "': bytes [", offset, ", +", n, ") lie past its end at ", size_);
    if (n) source_(offset, out, n);
  }

  const Entry* find(const std::string& key) const {
    for (const Entry& e : entries_)
      if (e.name == key) return &e;
    return nullptr;
  }
  /// The entry of tensor `key`; an error naming it when there is none.
  const Entry& entry(const std::string& key) const {
    const Entry* e = find(key);
    if (!e) STRATA_THROW(invalid_argument, "strata.checkpoint", "'", name_, "' has no tensor '", key, "'");
    return *e;
  }
  /// Tensor `key`, its checksum verified.
  Tensor read(const std::string& key) const {
    const Entry& e = entry(key);
    Tensor t = Tensor::empty(e.shape, e.dtype);
    fill(e, t.raw_data());
    return t;
  }
  /// Reads tensor `key` straight into `dst` (host memory, contiguous, of its shape and dtype),
  /// its checksum verified: no second copy of the tensor is made. On a checksum failure `dst`
  /// holds the bytes read.
  void read_into(const std::string& key, const Tensor& dst) const {
    const Entry& e = entry(key);
    STRATA_REQUIRE(dst.defined() && dst.device().kind == DeviceKind::cpu && dst.is_contiguous() &&
                       dst.shape() == e.shape && dst.dtype() == e.dtype,
                   invalid_argument, "strata.checkpoint", "'", name_, "': reading '", key, "' (", e.shape, " ",
                   name_of(e.dtype), ") into a tensor that is not a contiguous host tensor of that shape and dtype");
    fill(e, dst.raw_data());
  }
  /// Verifies every tensor's checksum, streaming each through it in pieces of at most 4 MiB
  /// (once: a verified reader returns at once).
  void verify() const {
    if (verified_) return;
    std::uint64_t largest = 0;
    for (const Entry& e : entries_) largest = std::max(largest, e.bytes);
    std::vector<unsigned char> piece(static_cast<std::size_t>(std::min<std::uint64_t>(largest, kVerifyPiece)));
    for (const Entry& e : entries_) {
      std::uint32_t crc = 0;
      for (std::uint64_t at = 0; at < e.bytes;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(e.bytes - at, kVerifyPiece));
        source_(e.offset + at, piece.data(), n);
        crc = crc32c(piece.data(), n, crc);
        at += n;
      }
      check(e, crc);
    }
    verified_ = true;
  }
  /// The CRC-32C of the whole file, combined from its sections' (the tensors' as the index
  /// records them: equal to the bytes' own once verify() or each read() has passed).
  std::uint32_t file_crc() const {
    std::uint32_t crc = crc32c(header_.data(), header_.size());
    for (const Entry& e : entries_) crc = crc32c_combine(crc, e.crc, e.bytes);
    return crc32c(index_.data(), index_.size(), crc);
  }

  /// A checksum as errors print it (0x1234abcd).
  static std::string hex(std::uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
  }

 private:
  static constexpr std::uint64_t kVerifyPiece = std::uint64_t{4} << 20;

  [[noreturn]] void corrupt(const std::string& what) const {
    STRATA_THROW(data_error, "strata.checkpoint.corrupt", "'", name_, "': ", what);
  }
  void check(const Entry& e, std::uint32_t crc) const {
    if (crc != e.crc)
      STRATA_THROW(checksum_error, "strata.checkpoint.checksum", "'", name_, "': tensor '", e.name,
                   "' fails its checksum (stored crc32c ", hex(e.crc), ", computed ", hex(crc), ")");
  }
  void fill(const Entry& e, void* out) const {
    if (e.bytes) source_(e.offset, out, static_cast<std::size_t>(e.bytes));
    check(e, crc32c(e.bytes ? out : nullptr, static_cast<std::size_t>(e.bytes)));
  }
  template <class T>
  static T get(const std::vector<unsigned char>& b, std::size_t at) {
    T v;
    std::memcpy(&v, b.data() + at, sizeof v);
    return v;
  }

  void parse(std::uint64_t n) {
    size_ = n;
    if (n < kHeaderBytes)
      STRATA_THROW(truncated_error, "strata.checkpoint.truncated", "'", name_, "': expected at least ", kHeaderBytes,
                   " bytes of header, found ", n);
    header_.resize(kHeaderBytes);
    source_(0, header_.data(), kHeaderBytes);
    if (std::memcmp(header_.data(), kMagic, sizeof kMagic) != 0) corrupt("not a strata checkpoint (bad magic)");
    const std::uint32_t stored = get<std::uint32_t>(header_, 60), computed = crc32c(header_.data(), 60);
    if (stored != computed)
      STRATA_THROW(checksum_error, "strata.checkpoint.checksum", "'", name_, "': the header fails its checksum (stored "
                   "crc32c ", hex(stored), ", computed ", hex(computed), ")");
    version_ = get<std::uint32_t>(header_, 8);
    const auto min_reader = get<std::uint32_t>(header_, 12);
    if (min_reader > kFormatVersion)
      STRATA_THROW(version_error, "strata.checkpoint.version", "'", name_, "': written by format v", version_,
                   " (readable from v", min_reader, "), this build reads <= v", kFormatVersion);
    const auto file_bytes = get<std::uint64_t>(header_, 16), index_offset = get<std::uint64_t>(header_, 24),
               index_bytes = get<std::uint64_t>(header_, 32);
    const auto count = get<std::uint32_t>(header_, 40);
    if (file_bytes != n)
      STRATA_THROW(truncated_error, "strata.checkpoint.truncated", "'", name_, "': expected ", file_bytes,
                   " bytes, found ", n);
    if (index_offset < kHeaderBytes || index_bytes < 8 || index_offset > n || index_bytes != n - index_offset)
      corrupt("the index [" + std::to_string(index_offset) + ", +" + std::to_string(index_bytes) +
              ") does not end the file of " + std::to_string(n) + " bytes");
    index_.resize(static_cast<std::size_t>(index_bytes));
    source_(index_offset, index_.data(), index_.size());
    const std::uint32_t index_crc = get<std::uint32_t>(index_, index_.size() - 4),
                        computed_index = crc32c(index_.data(), index_.size() - 4);
    if (index_crc != computed_index)
      STRATA_THROW(checksum_error, "strata.checkpoint.checksum", "'", name_,
                   "': the index fails its checksum (stored crc32c ", hex(index_crc), ", computed ", hex(computed_index), ")");
    // Every field read below is inside the index, which its checksum just vouched for; the
    // bounds are checked anyway (a valid checksum over nonsense written by a buggy writer).
    std::size_t at = 0;
    const std::size_t end = index_.size() - 4;
    auto need = [&](std::size_t k) {
      if (k > end - at) corrupt("the index ends inside an entry");
    };
    need(4);
    if (get<std::uint32_t>(index_, at) != count) corrupt("the header and index disagree on the tensor count");
    at += 4;
    std::uint64_t next = kHeaderBytes;
    for (std::uint32_t i = 0; i < count; ++i) {
      Entry e;
      need(2);
      const auto len = get<std::uint16_t>(index_, at);
      at += 2;
      need(len);
      e.name.assign(reinterpret_cast<const char*>(index_.data() + at), len);
      at += len;
      need(2);
      const auto dt = index_[at], nd = index_[at + 1];
      at += 2;
      if (dt > static_cast<unsigned>(DType::u8)) corrupt("tensor '" + e.name + "' has an unknown dtype tag " + std::to_string(dt));
      if (nd > kMaxDims) corrupt("tensor '" + e.name + "' declares " + std::to_string(nd) + " dimensions");
      e.dtype = static_cast<DType>(dt);
      need(8 * std::size_t{nd} + 20);
      std::uint64_t elements = 1;
      for (int d = 0; d < nd; ++d) {
        const auto extent = get<std::int64_t>(index_, at);
        at += 8;
        if (extent < 0 || (extent > 0 && elements > (std::uint64_t{1} << 62) / static_cast<std::uint64_t>(extent)))
          corrupt("tensor '" + e.name + "' has an impossible shape");
        elements *= static_cast<std::uint64_t>(extent);
        e.shape.push_back(extent);
      }
      e.offset = get<std::uint64_t>(index_, at);
      e.bytes = get<std::uint64_t>(index_, at + 8);
      e.crc = get<std::uint32_t>(index_, at + 16);
      at += 20;
      if (e.bytes != elements * size_of(e.dtype))
        corrupt("tensor '" + e.name + "' declares " + std::to_string(e.bytes) + " bytes for " + std::to_string(elements) +
                " elements of " + name_of(e.dtype));
      if (e.offset != next || e.bytes > index_offset - next)
        corrupt("tensor '" + e.name + "' is not where the previous one ends, or runs into the index");
      next = e.offset + e.bytes;
      for (const Entry& o : entries_)
        if (o.name == e.name) corrupt("tensor '" + e.name + "' appears twice");
      entries_.push_back(std::move(e));
    }
    if (next != index_offset || at != end) corrupt("bytes between the tensors and the index, or after the entries");
  }

  std::string name_;
  ByteSource source_;
  std::uint64_t size_ = 0;
  std::vector<unsigned char> header_, index_;
  std::vector<Entry> entries_;
  std::uint32_t version_ = 0;
  mutable bool verified_ = false;
};

/// Reads tensor `key` of `r` into `dst`: straight into its memory where it is a contiguous
/// host tensor (no second copy of a large table), else through a copy.
inline void read_into_tensor(const Reader& r, const std::string& key, Tensor dst) {
  NoGradGuard no_grad;
  if (dst.device().kind == DeviceKind::cpu && dst.is_contiguous())
    r.read_into(key, dst);
  else
    dst.copy_(r.read(key).to(dst.device()));
}

}  // namespace strata::checkpoint

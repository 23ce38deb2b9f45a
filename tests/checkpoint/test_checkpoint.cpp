// Checkpoint files and the manager: round trips of every dtype and shape; every single-byte
// flip detected (RELIABILITY C2), every truncation a typed error (C3), a newer format refused
// by name (C5); the manager keeps the newest N, skips a corrupt newest, and clears temporaries
// of dead writers without touching the committed files.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <strata/checkpoint/crc32c.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/manager.hpp>
#include <strata/strata.hpp>

#include "doctest.hpp"

namespace ck = strata::checkpoint;
using strata::Tensor;

namespace {

// Eight float16 values, as bits.
Tensor half_tensor() {
  Tensor h = Tensor::empty({2, 2, 2}, strata::DType::f16);
  const std::uint16_t bits[8] = {0x3C00, 0xBC00, 0x4000, 0x0001, 0x7BFF, 0x8000, 0x3555, 0x0000};
  std::memcpy(h.raw_data(), bits, sizeof bits);
  return h;
}

ck::NamedTensors sample() {
  strata::Generator g(5);
  return {{"model.0.weight", strata::uniform({3, 4}, -1, 1, g)},
          {"model.0.bias", strata::uniform({4}, -1, 1, g, strata::DType::f64)},
          {"optimizer.momentum_buffer.0", half_tensor()},
          {"step", strata::full({}, 1234, strata::DType::i64)},
          {"rng", strata::from_vector<std::int32_t>({3}, {7, -8, 9})},
          {"empty", Tensor::empty({0, 5})},
          {"bytes", strata::from_vector<std::uint8_t>({4}, {0, 1, 254, 255})}};
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.contiguous().raw_data());
  return {p, p + t.nbytes()};
}

std::filesystem::path scratch_dir(const char* tag) {
  auto d = std::filesystem::temp_directory_path() / ("strata_ckpt_" + std::string(tag) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("Checkpoint.Crc32c") {
  const char* v = "123456789";  // the standard check value of CRC-32C
  CHECK(ck::crc32c(v, 9) == 0xE3069283u);
  CHECK(ck::crc32c_portable(v, 9) == 0xE3069283u);
  std::vector<unsigned char> buf(1000);
  std::mt19937 rng(1);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 1000u}) {
    CHECK(ck::crc32c(buf.data(), n) == ck::crc32c_portable(buf.data(), n));
    // Incremental equals one pass.
    CHECK(ck::crc32c(buf.data() + n / 2, n - n / 2, ck::crc32c(buf.data(), n / 2)) == ck::crc32c(buf.data(), n));
    // Combined from the two halves' own CRCs equals one pass.
    CHECK(ck::crc32c_combine(ck::crc32c(buf.data(), n / 2), ck::crc32c(buf.data() + n / 2, n - n / 2), n - n / 2) ==
          ck::crc32c(buf.data(), n));
  }
}

TEST_CASE("Checkpoint.RoundTrip") {
  const auto dir = scratch_dir("roundtrip");
  const auto tensors = sample();
  ck::write_checkpoint(dir / "a.strata", tensors);
  const ck::Reader r(dir / "a.strata");
  REQUIRE(r.entries().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor got = r.read(name);
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(bytes_of(got) == bytes_of(t));
  }
  CHECK_THROWS_AS(r.read("missing"), strata::invalid_argument);
  // A non-contiguous tensor is stored as its contiguous copy.
  Tensor m = strata::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor mt = strata::detail::make_view(m, strata::Shape{3, 2}, strata::Shape{1, 3}, 0);  // the transpose
  REQUIRE_FALSE(mt.is_contiguous());
  ck::write_checkpoint(dir / "b.strata", {{"t", mt}});
  CHECK(ck::Reader(dir / "b.strata").read("t").to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  // No temporary left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir)) CHECK(e.path().filename().string()[0] != '.');
  std::filesystem::remove_all(dir);
}

// write_checkpoint() streams the file from the tensors: byte for byte what encode() makes in
// memory (a non-contiguous view and an empty tensor included), and its returned CRC-32C is
// the whole file's.
TEST_CASE("Checkpoint.StreamedWriteEqualsEncode") {
  const auto dir = scratch_dir("streamed");
  auto tensors = sample();
  Tensor m = strata::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  tensors.emplace_back("transposed", strata::detail::make_view(m, strata::Shape{3, 2}, strata::Shape{1, 3}, 0));
  const std::uint32_t crc = ck::write_checkpoint(dir / "s.strata", tensors);
  std::ifstream in(dir / "s.strata", std::ios::binary);
  const std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<unsigned char> encoded = ck::encode(tensors);
  CHECK(file == encoded);
  CHECK(crc == ck::crc32c(encoded.data(), encoded.size()));
  CHECK(ck::Reader(dir / "s.strata").read("transposed").to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  std::filesystem::remove_all(dir);
}

// A Reader holds the header and the index; each tensor's bytes are fetched when it is read,
// straight into the destination when one is given. Reading one tensor asks its source for
// that tensor alone; a file damaged or cut after it was opened fails the read that meets it.
TEST_CASE("Checkpoint.ReaderFetchesTensorsWhenRead") {
  const auto dir = scratch_dir("ondemand");
  const auto tensors = sample();
  const auto path = dir / "d.strata";
  const std::uint32_t crc = ck::write_checkpoint(path, tensors);
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();

  // Only the header, the index and the tensor read are asked for.
  std::vector<std::pair<std::uint64_t, std::size_t>> asked;
  const ck::Reader counted("counted", file.size(), [&](std::uint64_t at, void* out, std::size_t n) {
    asked.emplace_back(at, n);
    std::memcpy(out, file.data() + at, n);
  });
  const ck::Entry& w = counted.entry("model.0.weight");
  CHECK(asked.size() == 2);  // header and index
  CHECK(asked[0] == std::pair<std::uint64_t, std::size_t>{0, ck::kHeaderBytes});
  CHECK(asked[1].first == counted.index_offset());
  Tensor into = Tensor::empty({3, 4});
  counted.read_into("model.0.weight", into);
  REQUIRE(asked.size() == 3);
  CHECK(asked[2] == std::pair<std::uint64_t, std::size_t>{w.offset, w.bytes});
  CHECK(bytes_of(into) == bytes_of(tensors[0].second));
  CHECK(counted.file_crc() == crc);  // combined from the sections: no byte read again
  CHECK(asked.size() == 3);
  Tensor wrong = Tensor::empty({4, 3});
  CHECK_THROWS_AS(counted.read_into("model.0.weight", wrong), strata::invalid_argument);
  Tensor view = strata::detail::make_view(Tensor::empty({4, 3}), strata::Shape{3, 4}, strata::Shape{1, 3}, 0);
  CHECK_THROWS_AS(counted.read_into("model.0.weight", view), strata::invalid_argument);
  CHECK_THROWS_AS(counted.read_range(file.size() - 2, into.raw_data(), 4), strata::invalid_argument);

  // From the file: a tensor's byte flipped after opening fails that tensor's read (and
  // verify), not the others'.
  {
    const ck::Reader r(path);
    CHECK(r.file_crc() == crc);
    const ck::Entry& b = r.entry("model.0.bias");
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(b.offset + 3));
    f.put(static_cast<char>(file[b.offset + 3] ^ 0x10));
    f.close();
    CHECK_THROWS_AS(r.read("model.0.bias"), strata::checksum_error);
    CHECK(bytes_of(r.read("model.0.weight")) == bytes_of(tensors[0].second));
    CHECK_THROWS_AS(r.verify(), strata::checksum_error);
  }
  // Cut after opening: the read past the new end is a truncated_error naming the file.
  {
    ck::write_checkpoint(path, tensors);
    const ck::Reader r(path);
    std::filesystem::resize_file(path, r.entry("optimizer.momentum_buffer.0").offset + 1);
    CHECK(bytes_of(r.read("model.0.weight")) == bytes_of(tensors[0].second));
    CHECK_THROWS_WITH_AS(r.read("rng"), doctest::Contains("d.strata"), strata::truncated_error);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("Checkpoint.EveryByteFlipIsDetected") {  // RELIABILITY C2: 1000 flips, 1000 detected
  const std::vector<unsigned char> good = ck::encode(sample());
  std::mt19937_64 rng(2024);
  int detected = 0, silent = 0;
  for (int k = 0; k < 1000; ++k) {
    std::vector<unsigned char> bad = good;
    const std::size_t at = rng() % bad.size();
    bad[at] ^= static_cast<unsigned char>(1u + rng() % 255u);  // a different byte
    try {
      ck::Reader(std::move(bad), "flipped").verify();
      ++silent;
      FAIL_CHECK("a flip at byte " << at << " loaded silently");
    } catch (const strata::data_error&) {
      ++detected;
    }
  }
  CHECK(detected == 1000);
  CHECK(silent == 0);
  // The message names the file, the tensor and both checksums.
  std::vector<unsigned char> bad = good;
  bad[ck::kHeaderBytes] ^= 0x40;  // the first tensor's first byte
  try {
    ck::Reader(std::move(bad), "ckpt.strata").verify();
    FAIL_CHECK("no error");
  } catch (const strata::checksum_error& e) {
    const std::string w = e.what();
    CHECK(w.find("'ckpt.strata': tensor 'model.0.weight' fails its checksum (stored crc32c 0x") != std::string::npos);
    CHECK(w.find(", computed 0x") != std::string::npos);
  }
}

TEST_CASE("Checkpoint.TruncationIsTyped") {  // RELIABILITY C3
  const std::vector<unsigned char> good = ck::encode(sample());
  const std::size_t n = good.size();
  for (std::size_t keep : {std::size_t{0}, n / 100, n / 2, n * 999 / 1000, n - 1}) {
    std::vector<unsigned char> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep));
    try {
      ck::Reader(std::move(cut), "cut.strata");
      FAIL_CHECK("no error at " << keep << " bytes");
    } catch (const strata::truncated_error& e) {
      const std::string w = e.what();
      const std::string want = keep < ck::kHeaderBytes ? "expected at least 64 bytes of header, found " + std::to_string(keep)
                                                        : "expected " + std::to_string(n) + " bytes, found " + std::to_string(keep);
      CHECK_MESSAGE(w.find(want) != std::string::npos, w);
    }
  }
  // Bytes appended after a complete file are as wrong as bytes missing.
  std::vector<unsigned char> longer = good;
  longer.push_back(0);
  CHECK_THROWS_AS(ck::Reader(std::move(longer), "long.strata"), strata::truncated_error);
}

TEST_CASE("Checkpoint.NewerFormatIsRefused") {  // RELIABILITY C5
  auto newer = ck::encode(sample(), ck::kFormatVersion + 1, ck::kFormatVersion + 1);
  try {
    ck::Reader(std::move(newer), "new.strata");
    FAIL_CHECK("no error");
  } catch (const strata::version_error& e) {
    CHECK(std::string(e.what()).find("written by format v2 (readable from v2), this build reads <= v1") !=
          std::string::npos);
  }
  // A newer writer that keeps this version readable loads.
  auto compatible = ck::encode(sample(), ck::kFormatVersion + 1, ck::kFormatVersion);
  const ck::Reader r(std::move(compatible), "compat.strata");
  CHECK(r.format_version() == ck::kFormatVersion + 1);
  r.verify();
}

TEST_CASE("Checkpoint.Manager") {
  const auto dir = scratch_dir("manager");
  ck::CheckpointManager m(dir, 2);
  CHECK_FALSE(m.latest().has_value());
  auto tensors = sample();
  for (std::int64_t step : {100, 200, 300}) {
    tensors[3].second = strata::full({}, static_cast<double>(step), strata::DType::i64);
    m.save(step, tensors);
  }
  CHECK(m.steps() == std::vector<std::int64_t>{300, 200});  // the oldest pruned after the newest committed
  REQUIRE(m.latest().has_value());
  CHECK(*m.latest() == m.path_for(300));
  CHECK(ck::Reader(*m.latest()).read("step").item() == 300);

  // A temporary of a writer that died, and one of a live writer (this process).
  const auto dead = dir / ".ckpt-000000000400.strata.tmp.999999999";
  const auto live = dir / (".ckpt-000000000400.strata.tmp." + std::to_string(::getpid()));
  std::ofstream(dead) << "partial";
  std::ofstream(live) << "partial";
  // A corrupt newest (a flipped byte in its data): latest() falls back and says why.
  {
    std::fstream f(m.path_for(300), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(ck::kHeaderBytes));
    f.put('\x7f');
  }
  std::vector<std::string> skipped;
  REQUIRE(m.latest(&skipped).has_value());
  CHECK(*m.latest() == m.path_for(200));
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("ckpt-000000000300.strata") != std::string::npos);
  CHECK(skipped[0].find("fails its checksum") != std::string::npos);
  auto file_bytes = [](const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  const auto before = file_bytes(m.path_for(300));
  m.save(500, tensors);
  CHECK(file_bytes(m.path_for(300)) == before);  // a committed file is never rewritten
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  CHECK(m.steps() == std::vector<std::int64_t>{500, 300});
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(ck::CheckpointManager(dir, 0), strata::invalid_argument);
}

TEST_CASE("Checkpoint.WriteErrorsNameThePath") {  // RELIABILITY C7: a read-only directory
  if (::geteuid() == 0) return;  // root writes anywhere: covered by the missing-directory case below
  const auto dir = scratch_dir("readonly");
  std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  CHECK_THROWS_AS(ck::write_checkpoint(dir / "a.strata", sample()), strata::io_error);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Checkpoint.MissingDirectoryIsAnIoError") {
  try {
    ck::write_checkpoint("/nonexistent-strata-dir/a.strata", sample());
    FAIL_CHECK("no error");
  } catch (const strata::io_error& e) {
    CHECK(std::string(e.what()).find("/nonexistent-strata-dir/.a.strata.tmp.") != std::string::npos);
  }
  CHECK_THROWS_AS(ck::Reader(std::filesystem::path("/nonexistent-strata-dir/a.strata")), strata::io_error);
}

TEST_CASE("Checkpoint.KilledWriterLeavesTheLastCompleteOne") {  // RELIABILITY C1, by SIGKILL at random times
  const auto dir = scratch_dir("killed");
  strata::Generator g(9);
  ck::NamedTensors big = {{"w", strata::uniform({1 << 18}, -1, 1, g)}, {"step", strata::full({}, 0, strata::DType::i64)}};
  ck::CheckpointManager m(dir, 2);
  const auto t0 = std::chrono::steady_clock::now();
  m.save(0, big);
  // Kill points spread over about five saves, however fast this machine writes.
  const auto save_us = std::max<long>(1000, std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::steady_clock::now() - t0).count());
  std::set<std::string> torn_files;
  std::mt19937 rng(77);
  int recovered = 0, rounds = 50;
  std::int64_t newest = 0;
  for (int k = 0; k < rounds; ++k) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // keeps writing newer checkpoints until killed
      for (std::int64_t step = newest + 1;; ++step) {
        big[1].second = strata::full({}, static_cast<double>(step), strata::DType::i64);
        m.save(step, big);
      }
    }
    ::usleep(static_cast<useconds_t>(rng() % static_cast<unsigned long>(5 * save_us)));  // in a write, a rename, or between
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string()[0] == '.') torn_files.insert(e.path().filename().string());  // killed inside a write
    const auto latest = m.latest();
    REQUIRE(latest.has_value());
    const ck::Reader r(*latest);
    r.verify();
    const auto step = static_cast<std::int64_t>(r.read("step").item());
    CHECK(*latest == m.path_for(step));
    CHECK(step >= newest);  // never older than what was committed before
    newest = step;
    recovered += 1;
  }
  CHECK(recovered == rounds);
  const auto torn = torn_files.size();
  CHECK(torn > 0);      // some kills landed inside a write
  CHECK(newest > 0);    // and the writers committed between them
  MESSAGE(rounds, " kills, ", torn, " inside a write; the newest committed step is ", newest);
  m.save(newest + 1, big);  // the next save clears the dead writers' temporaries
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK_MESSAGE(e.path().filename().string()[0] != '.', e.path().string());
  std::filesystem::remove_all(dir);
}

TEST_CASE("Checkpoint.FullDiskIsAnIoErrorAndThePreviousSurvives") {  // RELIABILITY C7, by RLIMIT_FSIZE
  const auto dir = scratch_dir("full");
  ck::CheckpointManager m(dir, 3);
  strata::Generator g(4);
  m.save(1, {{"w", strata::uniform({1000}, -1, 1, g)}});
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // a file may grow to 64 KiB only: a 1 MB checkpoint cannot be written
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{65536, 65536};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      m.save(2, {{"w", strata::uniform({1 << 18}, -1, 1, g)}});
    } catch (const strata::io_error& e) {
      const std::string w = e.what();
      ::_exit(w.find("cannot write") != std::string::npos && w.find("File too large") != std::string::npos ? 0 : 2);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(4);  // no error
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(m.steps() == std::vector<std::int64_t>{1});  // nothing of step 2, no temporary left
  REQUIRE(m.latest().has_value());
  CHECK(*m.latest() == m.path_for(1));
  for (const auto& e : std::filesystem::directory_iterator(dir)) CHECK(e.path().filename().string()[0] != '.');
  std::filesystem::remove_all(dir);
}

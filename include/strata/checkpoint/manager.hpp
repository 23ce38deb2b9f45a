/// \file
/// CheckpointManager: numbered checkpoint files in one directory — save() commits a new one
/// atomically (checkpoint/file.hpp) and only then prunes the oldest beyond `keep`, and
/// clears the temporary files a crashed writer left; latest() is the newest file that reads
/// and verifies whole, skipping (and saying why) any that does not; set_aside() moves a damaged
/// one out of the numbered files, where no save prunes or overwrites it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/runtime/process_state.hpp>

namespace strata::checkpoint {

class CheckpointManager {
 public:
  /// Checkpoints in `dir` (created if missing), the newest `keep` kept.
  explicit CheckpointManager(std::filesystem::path dir, int keep = 3) : dir_(std::move(dir)), keep_(keep) {
    STRATA_REQUIRE(keep >= 1, invalid_argument, "strata.checkpoint", "keep must be at least 1, got ", keep);
  }

  const std::filesystem::path& directory() const noexcept { return dir_; }
  /// The file of step `step`: ckpt-<12-digit step>.strata.
  std::filesystem::path path_for(std::int64_t step) const {
    char name[64];
    std::snprintf(name, sizeof name, "ckpt-%012lld.strata", static_cast<long long>(step));
    return dir_ / name;
  }

  /// Writes step `step`'s checkpoint; afterwards removes all but the newest `keep` and any
  /// temporary file whose writer is gone. Returns the file written.
  std::filesystem::path save(std::int64_t step, const NamedTensors& tensors) {
    STRATA_REQUIRE(step >= 0, invalid_argument, "strata.checkpoint", "step must be non-negative, got ", step);
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) STRATA_THROW(io_error, "strata.checkpoint", "cannot create directory '", dir_.string(), "': ",
                         ec.message());
    const std::filesystem::path path = path_for(step);
    write_checkpoint(path, tensors);
    const auto all = steps();
    for (std::size_t i = static_cast<std::size_t>(keep_); i < all.size(); ++i)
      std::filesystem::remove(path_for(all[i]), ec);  // best effort: the new one is committed
    remove_stale_temporaries();
    return path;
  }

  /// The steps of the checkpoint files present, newest first (not verified).
  std::vector<std::int64_t> steps() const {
    return steps_named([](std::string_view tail) { return tail == ".strata"; });
  }

  /// The newest checkpoint that reads and verifies, or none. Each one skipped is reported in
  /// `skipped` (file and reason) when given.
  std::optional<std::filesystem::path> latest(std::vector<std::string>* skipped = nullptr) const {
    const auto r = open_latest(skipped);
    return r ? std::optional<std::filesystem::path>(r->name()) : std::nullopt;
  }
  /// latest(), read and verified: the reader over it. `also` (given a reader and its step)
  /// may check more — files the checkpoint refers to — and throw to have it skipped.
  std::optional<Reader> open_latest(std::vector<std::string>* skipped = nullptr,
                                    const std::function<void(const Reader&, std::int64_t)>& also = {}) const {
    std::vector<Unreadable> bad;
    auto r = open_latest(bad, also);
    if (skipped)
      for (const Unreadable& u : bad) skipped->push_back(u.file.string() + ": " + u.why);
    return r;
  }
  /// A checkpoint file that does not read or verify, and why.
  struct Unreadable {
    std::filesystem::path file;
    std::string why;
  };
  /// open_latest(), each file skipped (newer than the one returned, or every file when none
  /// reads) added to `skipped`.
  std::optional<Reader> open_latest(std::vector<Unreadable>& skipped,
                                    const std::function<void(const Reader&, std::int64_t)>& also = {}) const {
    for (std::int64_t s : steps()) {
      const auto p = path_for(s);
      try {
        Reader r(p);
        r.verify();
        if (also) also(r, s);
        return r;
      } catch (const error& e) {
        skipped.push_back({p, e.what()});
      }
    }
    return std::nullopt;
  }

  /// Moves a checkpoint that does not read out of the numbered files: renamed to
  /// "<name>.damaged" (".damaged.2", ... where that is taken), which steps() does not list, so
  /// no later save prunes it or writes over it and its bytes stay for whoever can recover
  /// them. Returns the new path.
  std::filesystem::path set_aside(const std::filesystem::path& file) const {
    std::filesystem::path to = file;
    to += ".damaged";
    for (int k = 2; std::filesystem::exists(to); ++k) {
      to = file;
      to += ".damaged." + std::to_string(k);
    }
    std::error_code ec;
    std::filesystem::rename(file, to, ec);
    if (ec)
      STRATA_THROW(io_error, "strata.checkpoint", "cannot set the damaged checkpoint '", file.string(), "' aside as '",
                   to.string(), "': ", ec.message());
    return to;
  }
  /// The steps of the checkpoints set aside (set_aside), newest first.
  std::vector<std::int64_t> set_aside_steps() const {
    auto out = steps_named([](std::string_view tail) { return tail.starts_with(".strata.damaged"); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

 private:
  /// The steps of the files "ckpt-<12 digits><tail>" whose tail `keep` takes, newest first.
  template <class Keep>
  std::vector<std::int64_t> steps_named(Keep keep) const {
    std::vector<std::int64_t> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string n = e.path().filename().string();
      long long s = -1;
      if (n.size() > 17 && n.compare(0, 5, "ckpt-") == 0 &&
          n.find_first_not_of("0123456789", 5) == 17 && std::sscanf(n.c_str() + 5, "%12lld", &s) == 1 && s >= 0 &&
          keep(std::string_view(n).substr(17)))
        out.push_back(s);
    }
    std::sort(out.rbegin(), out.rend());
    return out;
  }

  // ".<name>.tmp.<pid>" files (write_file_atomically) whose process no longer runs.
  void remove_stale_temporaries() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string n = e.path().filename().string();
      const auto at = n.rfind(".tmp.");
      if (n.empty() || n[0] != '.' || at == std::string::npos) continue;
      const long pid = std::atol(n.c_str() + at + 5);
      if (pid > 0 && runtime::is_gone(runtime::process_state(pid))) std::filesystem::remove(e.path(), ec);
    }
  }

  std::filesystem::path dir_;
  int keep_;
};

}  // namespace strata::checkpoint

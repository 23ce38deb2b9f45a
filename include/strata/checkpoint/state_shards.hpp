/// \file
/// A training state saved in shards: each rank writes the elements of the parameters it holds
/// the optimizer state of (a flat range of each parameter) to a shard file of its own, and the
/// chief's checkpoint is the manifest that records every shard by its CRC-32C and every
/// parameter's shape. StateSource reads a parameter or an optimizer slot by element range,
/// from an ordinary checkpoint's own tensors or from the shards a manifest records, so a state
/// saved on N ranks restores on any number of ranks, sharded or whole. docs/checkpoints.md,
/// "Sharded training state".
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/tensor/factory.hpp>

namespace strata::checkpoint {

/// The manifest's record of the shards: "shards.crc", each shard file's CRC-32C (int64 [N]).
inline constexpr const char* kShardCrcs = "shards.crc";

/// The file of rank `rank`'s shard of the training state `ranks` ranks saved at `step`.
inline std::filesystem::path state_shard_path(const std::filesystem::path& dir, int rank, int ranks,
                                              std::int64_t step) {
  char name[80];
  std::snprintf(name, sizeof name, "state-%05d-of-%05d-%012lld.strata", rank, ranks, static_cast<long long>(step));
  return dir / name;
}

/// Whether `r` is the manifest of a sharded training state.
inline bool is_sharded_state(const Reader& r) { return r.find(kShardCrcs) != nullptr; }

/// The parameter index of a slot key "<slot>.<i>" (an optimizer's state() name), or -1.
inline std::int64_t slot_index(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size() || name.size() - dot > 10) return -1;
  std::int64_t i = 0;
  for (std::size_t k = dot + 1; k < name.size(); ++k) {
    if (name[k] < '0' || name[k] > '9') return -1;
    i = i * 10 + (name[k] - '0');
  }
  return i;
}

namespace detail {
/// Elements [begin, end) of contiguous `t`, as a 1-D view.
inline Tensor flat_range(const Tensor& t, optim::ElementRange r) {
  return strata::detail::make_view(t, Shape{r.end - r.begin}, Shape{1}, t.impl()->offset() + r.begin);
}
}  // namespace detail

/// One rank's shard file: for each parameter i whose range `ranges[i]` is not empty,
/// "range.<i>" (int64 [2]: its first and past-last flat element), "param.<i>" (those elements,
/// 1-D) and "optimizer.<slot>.<i>" for each state slot `opt` holds of it: its state shaped like
/// the range where it holds shards (Optimizer::hold_shards), else the range of the whole slot.
/// `values` (optional): per parameter, its range's elements, where the parameter itself is not
/// held whole (ShardedStrategy's stage 3 keeps the blocks alone).
inline NamedTensors capture_state_shard(std::span<const Tensor> params, std::span<const optim::ElementRange> ranges,
                                        const optim::Optimizer& opt, std::span<const Tensor> values = {}) {
  STRATA_CHECK_EQ(params.size(), ranges.size(), "capture_state_shard: one range per parameter");
  STRATA_CHECK(values.empty() || values.size() == params.size(), "capture_state_shard: ", values.size(),
               " values for ", params.size(), " parameters");
  NamedTensors out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const optim::ElementRange r = ranges[i];
    if (r.end <= r.begin) continue;
    STRATA_CHECK(r.begin >= 0 && r.end <= params[i].numel() && params[i].is_contiguous(),
                 "capture_state_shard: range [", r.begin, ", ", r.end, ") of parameter ", i, " (", params[i].shape(), ")");
    out.emplace_back("range." + std::to_string(i), from_vector<std::int64_t>({2}, {r.begin, r.end}));
    if (!values.empty())
      STRATA_CHECK(values[i].is_contiguous() && values[i].numel() == r.end - r.begin, "capture_state_shard: the values of "
                   "parameter ", i, " (", values[i].shape(), ") are not its range [", r.begin, ", ", r.end, ")");
    out.emplace_back("param." + std::to_string(i), values.empty() ? detail::flat_range(params[i], r) : values[i]);
  }
  for (const auto& [name, t] : opt.state()) {
    const std::int64_t i = slot_index(name);
    STRATA_CHECK(i >= 0 && static_cast<std::size_t>(i) < params.size(), "capture_state_shard: optimizer slot '", name,
                 "' names no parameter");
    const optim::ElementRange r = ranges[static_cast<std::size_t>(i)];
    if (r.end <= r.begin) continue;
    const bool shard = opt.holds_shards();
    STRATA_CHECK(t.is_contiguous() && t.numel() == (shard ? r.end - r.begin : params[i].numel()),
                 "capture_state_shard: optimizer slot '", name, "' (", t.shape(), ") is not the state of ",
                 shard ? "this rank's shard" : "the parameter");
    out.emplace_back("optimizer." + name, shard ? t : detail::flat_range(t, r));
  }
  return out;
}

/// What the manifest records of the shards: each shard file's CRC-32C (kShardCrcs) and each
/// parameter's shape ("shards.shape.<i>", int64 [ndim]).
inline NamedTensors shard_records(std::span<const Tensor> params, std::span<const std::int64_t> crcs) {
  NamedTensors out;
  out.emplace_back(kShardCrcs, from_vector<std::int64_t>({static_cast<std::int64_t>(crcs.size())},
                                                         std::vector<std::int64_t>(crcs.begin(), crcs.end())));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Shape& s = params[i].shape();
    out.emplace_back("shards.shape." + std::to_string(i),
                     from_vector<std::int64_t>({s.ndim()}, std::vector<std::int64_t>(s.begin(), s.end())));
  }
  return out;
}

/// Removes the shard files in `dir` of the steps no manifest keeps (`kept`).
inline void prune_state_shards(const std::filesystem::path& dir, const std::vector<std::int64_t>& kept) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    int rank = -1, ranks = -1;
    long long step = -1;
    char tail = 0;
    if (std::sscanf(n.c_str(), "state-%d-of-%d-%lld.strat%c", &rank, &ranks, &step, &tail) != 4 ||
        n.size() < 7 || n.compare(n.size() - 7, 7, ".strata") != 0)
      continue;
    if (std::find(kept.begin(), kept.end(), step) == kept.end()) std::filesystem::remove(e.path(), ec);
  }
}

/// A checkpoint's parameters and optimizer slots, read by flat element range: from the
/// checkpoint's own tensors ("param.<i>", "optimizer.<slot>.<i>", whole), or from the shard
/// files its manifest records, each opened and checked against the CRC-32C recorded.
///
/// Reading an ordinary checkpoint reads every tensor whole and in the caller's order whatever
/// the range (the processes of a strategy read the chief's file together: shared_checkpoint).
/// Shard files are read directly by each process, only the pieces that overlap its range, so
/// their directory must be one every process sees (one host, or a shared file system).
class StateSource {
 public:
  /// Over the ordinary checkpoint `r`.
  explicit StateSource(const Reader& r) : r_(r) {
    while (r.find("param." + std::to_string(count_))) ++count_;
    for (const Entry& e : r.entries())
      if (e.name.rfind("optimizer.", 0) == 0 && slot_index(e.name) >= 0) slot_keys_.push_back(e.name);
  }
  /// Over `r`, a manifest (is_sharded_state) whose shards saved at `step` lie in `dir`.
  StateSource(const Reader& r, const std::filesystem::path& dir, std::int64_t step) : r_(r) {
    const Tensor crcs = r.read(kShardCrcs);
    STRATA_REQUIRE(crcs.dtype() == DType::i64 && crcs.ndim() == 1 && crcs.numel() > 0, data_error,
                   "strata.checkpoint.corrupt", "'", r.name(), "': malformed ", kShardCrcs);
    const int ranks = static_cast<int>(crcs.numel());
    while (r.find("shards.shape." + std::to_string(count_))) ++count_;
    shapes_.resize(count_);
    for (std::size_t i = 0; i < count_; ++i) {
      const Tensor s = r.read("shards.shape." + std::to_string(i));
      STRATA_REQUIRE(s.dtype() == DType::i64 && s.ndim() == 1, data_error, "strata.checkpoint.corrupt", "'", r.name(),
                     "': malformed shards.shape.", i);
      const auto dims = s.to_vector<std::int64_t>();
      STRATA_REQUIRE(dims.size() <= static_cast<std::size_t>(kMaxDims), data_error, "strata.checkpoint.corrupt", "'",
                     r.name(), "': shards.shape.", i, " has ", dims.size(), " dimensions");
      shapes_[i] = Shape(std::span<const std::int64_t>(dims));
    }
    pieces_.resize(count_);
    for (int k = 0; k < ranks; ++k) {
      const auto path = state_shard_path(dir, k, ranks, step);
      shards_.emplace_back(path);
      const Reader& shard = shards_.back();
      const auto want = static_cast<std::uint32_t>(crcs.data<std::int64_t>()[k]);
      if (const std::uint32_t got = shard.file_crc(); got != want)
        STRATA_THROW(checksum_error, "strata.checkpoint.checksum", "shard '", path.string(), "' is not the one '",
                     r.name(), "' recorded (CRC-32C ", Reader::hex(got), ", expected ", Reader::hex(want), ")");
      for (const Entry& e : shard.entries()) {
        if (e.name.rfind("range.", 0) == 0) {
          const std::int64_t i = slot_index(e.name);
          const Tensor range = shard.read(e.name);
          STRATA_REQUIRE(i >= 0 && static_cast<std::size_t>(i) < count_ && range.dtype() == DType::i64 &&
                             range.numel() == 2,
                         data_error, "strata.checkpoint.corrupt", "'", path.string(), "': malformed '", e.name, "'");
          const auto v = range.to_vector<std::int64_t>();
          pieces_[static_cast<std::size_t>(i)].push_back({static_cast<std::size_t>(k), {v[0], v[1]}});
        } else if (e.name.rfind("optimizer.", 0) == 0 && slot_index(e.name) >= 0 &&
                   std::find(slot_keys_.begin(), slot_keys_.end(), e.name) == slot_keys_.end()) {
          slot_keys_.push_back(e.name);
        }
      }
    }
    // Each parameter's pieces must tile it exactly: in order, without gaps or overlaps.
    for (std::size_t i = 0; i < count_; ++i) {
      auto& p = pieces_[i];
      std::sort(p.begin(), p.end(), [](const Piece& a, const Piece& b) { return a.range.begin < b.range.begin; });
      std::int64_t at = 0;
      for (const Piece& q : p) {
        STRATA_REQUIRE(q.range.begin == at && q.range.end > q.range.begin, data_error, "strata.checkpoint.corrupt", "'",
                       r.name(), "': the shards' pieces of parameter ", i, " do not tile it (a piece at [",
                       q.range.begin, ", ", q.range.end, ") where element ", at, " comes next)");
        at = q.range.end;
      }
      STRATA_REQUIRE(at == shapes_[i].numel(), data_error, "strata.checkpoint.corrupt", "'", r.name(),
                     "': the shards hold ", at, " elements of parameter ", i, ", which has ", shapes_[i].numel());
    }
  }

  bool sharded() const noexcept { return !shards_.empty(); }
  /// The ranks that saved the shards (0: an ordinary checkpoint).
  int ranks() const noexcept { return static_cast<int>(shards_.size()); }
  /// How many parameters the checkpoint holds.
  std::size_t params() const noexcept { return count_; }
  /// Every optimizer slot key saved ("optimizer.<slot>.<i>"): the file's order, or the shards'.
  const std::vector<std::string>& slot_keys() const noexcept { return slot_keys_; }

  /// Parameter i's shape and dtype as saved (checked against `like`): a mismatch is named.
  void check_param(std::size_t i, const Tensor& like) const {
    const std::string key = "param." + std::to_string(i);
    Shape shape;
    DType dtype;
    if (!sharded()) {
      const Entry& e = r_.entry(key);
      shape = e.shape, dtype = e.dtype;
    } else {
      shape = shapes_[i];
      dtype = shards_[pieces_[i].front().shard].entry(key).dtype;
    }
    if (shape != like.shape() || dtype != like.dtype())
      STRATA_THROW(invalid_argument, "strata.checkpoint.mismatch", "shape mismatch for '", key, "': ", shape, " ",
                   name_of(dtype), " in '", r_.name(), "' vs ", like.shape(), " ", name_of(like.dtype()), " in the model");
  }

  /// Elements `range` of `key` ("param.<i>" or "optimizer.<slot>.<i>" of parameter i) into
  /// `dst`, a contiguous host tensor of that many elements of the saved dtype; every piece
  /// read is checked against its CRC-32C. An ordinary checkpoint's tensor is read whole.
  void read_into(const std::string& key, std::size_t i, optim::ElementRange range, const Tensor& dst) const {
    NoGradGuard no_grad;
    STRATA_CHECK(dst.defined() && dst.device().kind == DeviceKind::cpu && dst.is_contiguous() &&
                     dst.numel() == range.end - range.begin,
                 "StateSource::read_into: '", key, "' into a tensor that is not ", range.end - range.begin,
                 " contiguous host elements");
    if (!sharded()) {
      const Entry& e = r_.entry(key);
      if (range.begin == 0 && range.end == e.shape.numel() && dst.shape() == e.shape) return r_.read_into(key, dst);
      const Tensor whole = r_.read(key);
      copy_elements(whole, range.begin, dst, 0, range.end - range.begin, key, r_.name());
      return;
    }
    STRATA_CHECK(i < count_, "StateSource::read_into: parameter ", i, " of ", count_);
    std::int64_t covered = 0;
    for (const Piece& q : pieces_[i]) {
      const std::int64_t lo = std::max(q.range.begin, range.begin), hi = std::min(q.range.end, range.end);
      if (lo >= hi) continue;
      const Reader& shard = shards_[q.shard];
      const Entry* e = shard.find(key);
      STRATA_REQUIRE(e != nullptr, data_error, "strata.checkpoint.corrupt", "'", shard.name(), "' holds no '", key,
                     "' for its elements [", q.range.begin, ", ", q.range.end, ") of parameter ", i,
                     ", which other shards hold");
      STRATA_REQUIRE(e->dtype == dst.dtype() && e->shape.numel() == q.range.end - q.range.begin, data_error,
                     "strata.checkpoint.corrupt", "'", shard.name(), "': '", key, "' is ", e->shape, " ",
                     name_of(e->dtype), ", not its range's ", q.range.end - q.range.begin, " elements of ",
                     name_of(dst.dtype()));
      if (lo == q.range.begin && hi == q.range.end)  // the whole piece: straight into its place
        shard.read_into(key, detail::flat_range(dst, {lo - range.begin, hi - range.begin}));
      else
        copy_elements(shard.read(key), lo - q.range.begin, dst, lo - range.begin, hi - lo, key, shard.name());
      covered += hi - lo;
    }
    STRATA_REQUIRE(covered == range.end - range.begin, data_error, "strata.checkpoint.corrupt", "'", r_.name(),
                   "': its shards hold ", covered, " of elements [", range.begin, ", ", range.end, ") of '", key, "'");
  }

  /// Whether the shards hold any of `key`'s elements inside `range` (an ordinary checkpoint:
  /// whether it holds `key`). A slot no shard holds there has no state yet.
  bool holds(const std::string& key, std::size_t i, optim::ElementRange range) const {
    if (!sharded()) return r_.find(key) != nullptr;
    for (const Piece& q : pieces_.at(i))
      if (std::max(q.range.begin, range.begin) < std::min(q.range.end, range.end) && shards_[q.shard].find(key))
        return true;
    return false;
  }

  /// Every shard's every tensor checked against its CRC-32C (an ordinary checkpoint: its own).
  void verify() const {
    if (!sharded()) return r_.verify();
    for (const Reader& s : shards_) s.verify();
  }

 private:
  struct Piece {
    std::size_t shard = 0;
    optim::ElementRange range;
  };
  static void copy_elements(const Tensor& from, std::int64_t from_at, const Tensor& to, std::int64_t to_at,
                            std::int64_t n, const std::string& key, const std::string& file) {
    STRATA_REQUIRE(from.dtype() == to.dtype() && from_at >= 0 && from_at + n <= from.numel(), data_error,
                   "strata.checkpoint.corrupt", "'", file, "': '", key, "' (", from.shape(), " ", name_of(from.dtype()),
                   ") does not hold the elements asked of it");
    if (n == 0) return;
    const std::size_t es = size_of(from.dtype());
    std::memcpy(static_cast<char*>(to.raw_data()) + static_cast<std::size_t>(to_at) * es,
                static_cast<const char*>(from.raw_data()) + static_cast<std::size_t>(from_at) * es,
                static_cast<std::size_t>(n) * es);
  }

  const Reader& r_;
  std::size_t count_ = 0;
  std::vector<Shape> shapes_;               // sharded: each parameter's shape
  std::vector<Reader> shards_;              // sharded: rank k's shard file
  std::vector<std::vector<Piece>> pieces_;  // sharded: parameter i's pieces, in element order
  std::vector<std::string> slot_keys_;
};

}  // namespace strata::checkpoint

/// \file
/// Character-level text as a dataset for next-token prediction: a corpus (its vocabulary of
/// distinct bytes and the text as token ids), windows of it as (tokens, next tokens) pairs,
/// and the reference corpus, the text of Debian's fortunes package (/usr/share/games/fortunes,
/// or $STRATA_FORTUNES_DIR): every fortune file in name order, not the .dat indexes (binary)
/// nor the .u8 links (the same files again).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/support/environment.hpp>
#include <strata/support/error.hpp>

namespace strata::data {

/// Text as token ids over its own vocabulary: the distinct bytes it holds, in byte order.
struct CharCorpus {
  std::vector<unsigned char> vocabulary;  ///< token id -> byte
  std::vector<std::int64_t> tokens;       ///< the text, one id per byte

  explicit CharCorpus(const std::string& text) {
    std::array<bool, 256> seen{};
    for (unsigned char c : text) seen[c] = true;
    std::array<std::int64_t, 256> id{};
    for (int c = 0; c < 256; ++c)
      if (seen[static_cast<std::size_t>(c)]) {
        id[static_cast<std::size_t>(c)] = static_cast<std::int64_t>(vocabulary.size());
        vocabulary.push_back(static_cast<unsigned char>(c));
      }
    tokens.reserve(text.size());
    for (unsigned char c : text) tokens.push_back(id[c]);
  }
  std::int64_t vocabulary_size() const noexcept { return static_cast<std::int64_t>(vocabulary.size()); }
  /// The text of token ids (each must be below vocabulary_size()).
  std::string decode(std::span<const std::int64_t> ids) const {
    std::string out;
    out.reserve(ids.size());
    for (std::int64_t t : ids) {
      STRATA_CHECK(t >= 0 && t < vocabulary_size(), "decode: token ", t, " outside a vocabulary of ", vocabulary_size());
      out.push_back(static_cast<char>(vocabulary[static_cast<std::size_t>(t)]));
    }
    return out;
  }
};

/// Non-overlapping windows of `context` tokens of `tokens` as a dataset: input [N, context]
/// (int64) and, as labels, the tokens that follow each position, [N, context] (the same
/// window shifted by one). The tail too short for a window is left out.
inline TensorDataset next_token_windows(std::span<const std::int64_t> tokens, std::int64_t context) {
  STRATA_CHECK(context > 0, "next_token_windows: the context must be positive, got ", context);
  const auto size = static_cast<std::int64_t>(tokens.size());
  const std::int64_t n = size > context ? (size - 1) / context : 0;
  STRATA_CHECK(n > 0, "next_token_windows: ", size, " tokens hold no window of ", context, " and its next token");
  Tensor x = Tensor::empty({n, context}, DType::i64), y = Tensor::empty({n, context}, DType::i64);
  std::int64_t* xp = x.data<std::int64_t>();
  std::int64_t* yp = y.data<std::int64_t>();
  for (std::int64_t i = 0; i < n * context; ++i) {
    xp[i] = tokens[static_cast<std::size_t>(i)];
    yp[i] = tokens[static_cast<std::size_t>(i + 1)];
  }
  return TensorDataset(x, y);
}

/// The directory the fortunes are read from when none is given.
inline std::string default_fortunes_dir() {
  if (const char* d = environment::get("STRATA_FORTUNES_DIR")) return d;
  return "/usr/share/games/fortunes";
}

/// The fortunes' text: the regular files of `dir` that are neither indexes (.dat) nor links,
/// concatenated in name order. A missing directory is an error naming the package.
inline std::string fortunes_text(const std::string& dir = default_fortunes_dir()) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    STRATA_THROW(::strata::data_error, "strata.data", "no fortunes in '", dir,
                 "': install Debian's fortunes package (apt-get install fortunes) or set STRATA_FORTUNES_DIR");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  STRATA_CHECK(!text.empty(), "no fortune files in '", dir, "'");
  return text;
}

}  // namespace strata::data

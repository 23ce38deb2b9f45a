/// \file
/// Words of a text for skip-gram with negative sampling (word2vec): a corpus of lower-cased
/// words over its vocabulary, most frequent first, and the training rows drawn from it —
/// (center, context, negatives), the negatives from word2vec's noise distribution.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <strata/support/check.hpp>
#include <strata/tensor/random.hpp>  // Generator
#include <strata/tensor/tensor.hpp>

namespace strata::data {

/// A text's words (runs of ASCII letters, with apostrophes inside them, lower-cased) as ids
/// over its vocabulary: the words seen at least `min_count` times, by descending count (ties
/// in byte order); rarer words are left out of `tokens`.
class WordCorpus {
 public:
  explicit WordCorpus(const std::string& text, std::int64_t min_count = 1) {
    STRATA_CHECK(min_count >= 1, "WordCorpus: min_count must be at least 1, got ", min_count);
    std::vector<std::string> seq = split(text);
    std::unordered_map<std::string, std::int64_t> count;
    for (const std::string& w : seq) ++count[w];
    std::vector<std::pair<std::string, std::int64_t>> kept;
    for (auto& [w, c] : count)
      if (c >= min_count) kept.emplace_back(w, c);
    std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    for (auto& [w, c] : kept) {
      index_.emplace(w, static_cast<std::int64_t>(words_.size()));
      words_.push_back(w);
      counts_.push_back(c);
    }
    tokens_.reserve(seq.size());
    for (const std::string& w : seq)
      if (const auto it = index_.find(w); it != index_.end()) tokens_.push_back(it->second);
    STRATA_CHECK(!words_.empty(), "WordCorpus: no word occurs ", min_count, " times in a text of ", text.size(), " bytes");
  }

  std::int64_t vocabulary_size() const noexcept { return static_cast<std::int64_t>(words_.size()); }
  const std::vector<std::string>& words() const noexcept { return words_; }
  /// Occurrences of each word, by id.
  const std::vector<std::int64_t>& counts() const noexcept { return counts_; }
  /// The text's kept words, as ids.
  const std::vector<std::int64_t>& tokens() const noexcept { return tokens_; }
  /// The id of `word` (lower case), or -1 if it is not in the vocabulary.
  std::int64_t id(std::string_view word) const {
    const auto it = index_.find(std::string(word));
    return it == index_.end() ? -1 : it->second;
  }
  const std::string& word(std::int64_t id) const {
    STRATA_CHECK(id >= 0 && id < vocabulary_size(), "WordCorpus: word id ", id, " outside a vocabulary of ",
                 vocabulary_size());
    return words_[static_cast<std::size_t>(id)];
  }

 private:
  static std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> out;
    std::string cur;
    auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    for (std::size_t i = 0; i <= text.size(); ++i) {
      const char c = i < text.size() ? text[i] : ' ';
      if (letter(c)) {
        cur.push_back(static_cast<char>(c | 0x20));  // ASCII lower case
      } else if (c == '\'' && !cur.empty() && i + 1 < text.size() && letter(text[i + 1])) {
        cur.push_back(c);  // don't, it's
      } else if (!cur.empty()) {
        out.push_back(std::move(cur));
        cur.clear();
      }
    }
    return out;
  }

  std::vector<std::string> words_;
  std::vector<std::int64_t> counts_, tokens_;
  std::unordered_map<std::string, std::int64_t> index_;
};

namespace detail {
/// SplitMix64's finaliser: a fixed, well-mixed hash of a 64-bit key.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace detail

/// The bucket of the word bigram (previous, word) among `buckets` (fastText's hashed word
/// n-grams): a fixed hash, so every process and run agrees. `previous` is -1 at the start.
inline std::int64_t bigram_bucket(std::int64_t previous, std::int64_t word, std::int64_t buckets) noexcept {
  const auto key = (static_cast<std::uint64_t>(previous + 1) << 32) ^ static_cast<std::uint64_t>(word);
  return static_cast<std::int64_t>(detail::mix64(key) % static_cast<std::uint64_t>(buckets));
}

/// Skip-gram rows of `tokens`: for each position and each other position at most `window`
/// away, the row [center, context, negative_1 .. negative_k] (int64 [N, 2 + k]), the k
/// negatives drawn by `gen` from the words' counts to the power 0.75 (word2vec's noise
/// distribution; `counts` by id). With `bigram_buckets` > 0 each row ends with one more
/// column, the bigram_bucket of (the word before the center, the center). The same tokens,
/// counts and generator state give the same rows.
inline Tensor skip_gram_rows(std::span<const std::int64_t> tokens, std::span<const std::int64_t> counts,
                             std::int64_t window, std::int64_t negatives, Generator& gen, std::int64_t bigram_buckets = 0) {
  STRATA_CHECK(window >= 1 && negatives >= 0, "skip_gram_rows: window ", window, " must be at least 1 and negatives ",
               negatives, " not negative");
  STRATA_CHECK(bigram_buckets >= 0, "skip_gram_rows: bigram_buckets ", bigram_buckets, " is negative");
  STRATA_CHECK(!counts.empty(), "skip_gram_rows: an empty vocabulary");
  std::vector<double> cumulative(counts.size());
  double total = 0;
  for (std::size_t w = 0; w < counts.size(); ++w) cumulative[w] = total += std::pow(static_cast<double>(counts[w]), 0.75);
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::int64_t rows = 0;
  for (std::int64_t i = 0; i < n; ++i) rows += std::min(n - 1, i + window) - std::max<std::int64_t>(0, i - window);
  const std::int64_t width = 2 + negatives + (bigram_buckets > 0 ? 1 : 0);
  Tensor out = Tensor::empty({rows, width}, DType::i64);
  std::int64_t* p = out.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = std::max<std::int64_t>(0, i - window); j <= std::min(n - 1, i + window); ++j) {
      if (j == i) continue;
      *p++ = tokens[static_cast<std::size_t>(i)];
      *p++ = tokens[static_cast<std::size_t>(j)];
      for (std::int64_t k = 0; k < negatives; ++k) {
        const double u = gen.uniform() * total;
        const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
        *p++ = std::min<std::int64_t>(at, static_cast<std::int64_t>(counts.size()) - 1);
      }
      if (bigram_buckets > 0)
        *p++ = bigram_bucket(i > 0 ? tokens[static_cast<std::size_t>(i - 1)] : -1, tokens[static_cast<std::size_t>(i)],
                             bigram_buckets);
    }
  return out;
}

}  // namespace strata::data

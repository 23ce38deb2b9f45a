#include "doctest.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif

#include <strata/strata.hpp>

namespace fs = std::filesystem;
using strata::data::Pipeline;
using strata::data::TensorDataset;
using strata::Tensor;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("strata-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string write(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    std::ofstream(path / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                       static_cast<std::streamsize>(bytes.size()));
    return (path / name).string();
  }
};

std::vector<std::uint8_t> idx(std::vector<std::uint32_t> dims, std::size_t data_bytes) {
  std::vector<std::uint8_t> b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<std::uint8_t>(i % 251));
  return b;
}

void check_data_error(const std::string& path, const std::string& expected) {
  try {
    strata::data::read_idx(path);
    FAIL("no error for ", path);
  } catch (const strata::error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);  // names the file
    CHECK(msg.find(expected) != std::string::npos);
  }
}

TensorDataset counting(std::int64_t n) {
  std::vector<double> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    xs.push_back(static_cast<double>(i));
    xs.push_back(static_cast<double>(-i));
    ys.push_back(static_cast<double>(i));
  }
  return TensorDataset(strata::from_vector<double>({n, 2}, xs, strata::DType::f32),
                       strata::from_vector<double>({n}, ys, strata::DType::i64));
}

std::vector<std::int64_t> epoch_labels(Pipeline& p) {
  std::vector<std::int64_t> out;
  for (const auto& b : p)
    for (auto v : b.y.to_vector<std::int64_t>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("Data.Idx.ReadsValidFiles") {
  TempDir d;
  auto a = strata::data::read_idx(d.write("ok", idx({3, 2, 2}, 12)));
  CHECK(a.dims == std::vector<std::int64_t>{3, 2, 2});
  CHECK(a.bytes.size() == 12);
  CHECK(a.bytes[5] == 5);
}

TEST_CASE("Data.Idx.RejectsBadFilesByName") {
  TempDir d;
  check_data_error((d.path / "missing").string(), "cannot open");
  check_data_error(d.write("empty", {}), "empty file");
  auto bad = idx({3}, 3);
  bad[0] = 0x42;
  check_data_error(d.write("magic", bad), "bad magic");
  check_data_error(d.write("truncated", idx({10, 4}, 39)), "truncated");
  check_data_error(d.write("trailing", idx({2}, 3)), "trailing data");
  check_data_error(d.write("header", {0, 0, 8, 3, 0, 0}), "truncated header");
  check_data_error(d.path.string(), "directory");
  CHECK_THROWS_AS(strata::data::read_idx((d.path / "missing").string()), strata::io_error);
  CHECK_THROWS_AS(strata::data::read_idx(d.write("empty2", {})), strata::data_error);
}

#if STRATA_HAS_ZLIB
TEST_CASE("Data.Idx.ReadsGzipAndRejectsTruncatedGzip") {
  TempDir d;
  const auto raw = idx({4, 3}, 12);
  const std::string gz = (d.path / "a.gz").string();
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(f);
  CHECK(strata::data::read_idx(gz).dims == std::vector<std::int64_t>{4, 3});
  std::ifstream in(gz, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  bytes.resize(bytes.size() / 2);
  check_data_error(d.write("cut.gz", bytes), "truncated gzip");
}
#endif

TEST_CASE("Data.FashionMnistLayout.CountMismatchIsNamed") {
  TempDir d;
  d.write("train-images-idx3-ubyte", idx({5, 2, 2}, 20));
  d.write("train-labels-idx1-ubyte", idx({4}, 4));
  CHECK_THROWS_WITH_AS(strata::data::fashion_mnist_train(d.path.string()), doctest::Contains("count mismatch"),
                       strata::data_error);
  d.write("t10k-images-idx3-ubyte", idx({2, 2, 2}, 8));
  d.write("t10k-labels-idx1-ubyte", idx({2}, 2));
  auto t = strata::data::fashion_mnist_test(d.path.string());
  CHECK(t.x.shape() == strata::Shape{2, 1, 2, 2});
  CHECK(t.x.to_vector<float>()[3] == doctest::Approx(3.0f / 255.0f));
  CHECK_THROWS_AS(strata::data::fashion_mnist_test((d.path / "nowhere").string()), strata::io_error);
}

#ifdef STRATA_TEST_FASHION_MNIST_DIR
TEST_CASE("Data.FashionMnist.RealFiles") {
  auto train = strata::data::fashion_mnist_train(STRATA_TEST_FASHION_MNIST_DIR);
  auto test = strata::data::fashion_mnist_test(STRATA_TEST_FASHION_MNIST_DIR);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.x.shape() == strata::Shape{60000, 1, 28, 28});
  const auto labels = test.y.to_vector<std::int64_t>();
  CHECK(*std::min_element(labels.begin(), labels.end()) == 0);
  CHECK(*std::max_element(labels.begin(), labels.end()) == 9);
  const auto px = test.x.to_vector<float>();
  CHECK(*std::max_element(px.begin(), px.end()) <= 1.0f);
}
#endif

TEST_CASE("Data.Pipeline.ShuffleIsASeededPermutationPerEpoch") {
  Pipeline p = Pipeline(counting(100)).shuffle(5).batch(7);
  Pipeline q = Pipeline(counting(100)).shuffle(5).batch(7);
  const auto e0 = epoch_labels(p), e1 = epoch_labels(p);
  CHECK(e0 == epoch_labels(q));  // same seed, same epoch: same order
  CHECK(e0 != e1);               // reshuffled each epoch
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 100; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);
  p.set_epoch(1);
  CHECK(epoch_labels(p) == e1);  // resume at an epoch
}

TEST_CASE("Data.Pipeline.BatchesAndRemainder") {
  Pipeline keep = Pipeline(counting(10)).batch(4);
  std::vector<std::int64_t> sizes;
  for (const auto& b : keep) {
    sizes.push_back(b.size);
    CHECK(b.x.dim(0) == b.size);
    CHECK(b.x.to_vector<float>()[1] == -b.x.to_vector<float>()[0]);  // rows stay whole
  }
  CHECK(sizes == std::vector<std::int64_t>{4, 4, 2});
  CHECK(keep.num_batches() == 3);
  Pipeline drop = Pipeline(counting(10)).batch(4, true);
  CHECK(epoch_labels(drop).size() == 8);
  CHECK(drop.num_batches() == 2);
  CHECK(Pipeline(counting(10)).batch(4).take(1).num_batches() == 1);
}

TEST_CASE("Data.Pipeline.PaddedRemainder") {
  Pipeline pad = Pipeline(counting(10)).batch(4, strata::data::Remainder::pad);
  std::vector<std::int64_t> sizes, padding, global;
  std::vector<std::int64_t> labels;
  for (const auto& b : pad) {
    sizes.push_back(b.size);
    padding.push_back(b.padding);
    global.push_back(b.global_size);
    CHECK(b.x.dim(0) == 4);
    const auto y = b.y.to_vector<std::int64_t>();
    labels.insert(labels.end(), y.begin(), y.end());
    if (b.padding) {
      const auto x = b.x.to_vector<float>();
      for (std::size_t i = 2 * x.size() / 4; i < x.size(); ++i) CHECK(x[i] == 0.0f);  // padding inputs are 0
    }
  }
  CHECK(sizes == std::vector<std::int64_t>{4, 4, 4});
  CHECK(padding == std::vector<std::int64_t>{0, 0, 2});
  CHECK(global == std::vector<std::int64_t>{4, 4, 2});  // real examples: what the loss is scaled by
  CHECK(labels == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, strata::kPadLabel, strata::kPadLabel});
  // One worker's part of the padded batch: worker 1 of 2 gets only padding.
  Pipeline part = Pipeline(counting(10)).batch(4, strata::data::Remainder::pad).split(2, 1);
  std::vector<std::int64_t> part_padding;
  for (const auto& b : part) part_padding.push_back(b.padding);
  CHECK(part_padding == std::vector<std::int64_t>{0, 0, 2});
  // Padding needs class labels to mark.
  strata::data::TensorDataset floats(strata::zeros({3, 2}), strata::zeros({3}));
  CHECK_THROWS_WITH_AS(Pipeline(floats).batch(2, strata::data::Remainder::pad),
                       doctest::Contains("needs integer class labels"), strata::invalid_argument);
}

TEST_CASE("Data.Loss.PaddingRowsAddNothing") {
  // cross-entropy over [examples; padding rows] equals cross-entropy over the examples, with
  // the same gradient for the examples' rows and zero for the padding rows.
  strata::Generator g(9);
  Tensor logits = strata::uniform({5, 3}, -2, 2, g);
  Tensor labels = strata::from_vector<std::int64_t>({5}, {2, 0, 1, strata::kPadLabel, strata::kPadLabel});
  const std::vector<float> all = logits.to_vector<float>();
  Tensor real = strata::from_vector<float>({3, 3}, std::vector<float>(all.begin(), all.begin() + 9));
  Tensor real_labels = strata::from_vector<std::int64_t>({3}, {2, 0, 1});
  logits.requires_grad_(true);
  real.requires_grad_(true);
  const std::vector<Tensor> pa{logits}, pb{real};
  Tensor a = strata::softmax_cross_entropy(logits, labels, 1.0 / 3);
  const auto ga = strata::grad(a, pa)[0].to_vector<float>();
  Tensor b = strata::softmax_cross_entropy(real, real_labels, 1.0 / 3);
  const auto gb = strata::grad(b, pb)[0].to_vector<float>();
  CHECK(a.item() == doctest::Approx(b.item()).epsilon(1e-6));
  for (std::size_t i = 0; i < 9; ++i) CHECK(ga[i] == doctest::Approx(gb[i]).epsilon(1e-6));
  for (std::size_t i = 9; i < 15; ++i) CHECK(ga[i] == 0.0f);
  CHECK_THROWS_WITH_AS(strata::softmax_cross_entropy(logits, strata::from_vector<std::int64_t>({5}, {0, 0, 0, -2, 0}), 1.0),
                       doctest::Contains("is not the padding label"), strata::invalid_argument);
}

TEST_CASE("Data.Pipeline.ShardsAreDisjointAndComplete") {
  std::multiset<std::int64_t> all;
  for (int i = 0; i < 3; ++i) {
    Pipeline s = Pipeline(counting(50)).shuffle(9).shard(3, i).batch(4);
    CHECK(s.size() == (i < 2 ? 17 : 16));
    for (auto v : epoch_labels(s)) all.insert(v);
  }
  CHECK(all.size() == 50);
  CHECK(std::set<std::int64_t>(all.begin(), all.end()).size() == 50);
  CHECK_THROWS_AS(Pipeline(counting(5)).shard(2, 2), strata::invalid_argument);
}

TEST_CASE("Data.Pipeline.PrefetchYieldsTheSameBatches") {
  Pipeline plain = Pipeline(counting(1000)).shuffle(1).batch(32);
  Pipeline ahead = plain.prefetch(3);
  for (int epoch = 0; epoch < 2; ++epoch) CHECK(epoch_labels(plain) == epoch_labels(ahead));
  // Leaving an epoch early stops its producer thread cleanly.
  for (const auto& b : ahead) {
    CHECK(b.index == 0);
    break;
  }
}

namespace {
// Runs the parts on threads of its own, and counts the batches it was given.
struct ThreadedRows final : strata::data::RowParallelism {
  int parts, calls = 0;
  explicit ThreadedRows(int k) : parts(k) {}
  void run(std::int64_t n, void (*fn)(void*, std::int64_t, std::int64_t), void* ctx) override {
    ++calls;
    std::vector<std::thread> threads;
    for (int r = 0; r < parts; ++r)
      threads.emplace_back([this, n, fn, ctx, r] {
        fn(ctx, strata::data::detail::split_begin(n, r, parts), strata::data::detail::split_begin(n, r + 1, parts));
      });
    for (auto& t : threads) t.join();
  }
};
}  // namespace

TEST_CASE("Data.Pipeline.ParallelRowsYieldTheSameBatches") {
  // Rows of 4 KiB: a batch of 32 is large enough to be copied in parts.
  const std::int64_t n = 203, width = 1024;
  std::vector<double> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < width; ++j) xs.push_back(static_cast<double>(i * width + j));
    ys.push_back(static_cast<double>(i));
  }
  const TensorDataset ds(strata::from_vector<double>({n, width}, xs, strata::DType::f32),
                         strata::from_vector<double>({n}, ys, strata::DType::i64));
  for (auto remainder : {strata::data::Remainder::keep, strata::data::Remainder::pad}) {
    Pipeline plain = Pipeline(ds).shuffle(3).batch(32, remainder);
    auto rows = std::make_shared<ThreadedRows>(3);
    Pipeline parallel = plain.parallel_rows(rows);
    std::vector<strata::data::Batch> want, got;
    for (const auto& b : plain) want.push_back(b);
    for (const auto& b : parallel) got.push_back(b);
    REQUIRE(want.size() == got.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      CHECK(want[k].x.to_vector<float>() == got[k].x.to_vector<float>());
      CHECK(want[k].y.to_vector<std::int64_t>() == got[k].y.to_vector<std::int64_t>());
      CHECK(want[k].padding == got[k].padding);
    }
    // Every full batch's x went through it (128 KiB); the last one's 11 rows (44 KiB) are
    // copied on this thread, below the size where a hand-off pays.
    CHECK(rows->calls == static_cast<int>(want.size()) - 1);
  }
}

TEST_CASE("Data.TensorDataset.SeveralInputsAndNoLabels") {
  using namespace strata;
  // Three inputs of different shapes and dtypes, example i holding i in each, and labels.
  const std::int64_t n = 23;
  std::vector<float> a(n * 2), c(n);
  std::vector<std::int64_t> b(n), y(n);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(2 * i)] = a[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(i);
    b[static_cast<std::size_t>(i)] = y[static_cast<std::size_t>(i)] = i;
    c[static_cast<std::size_t>(i)] = static_cast<float>(i);
  }
  data::TensorDataset ds(data::Inputs(from_vector<float>({n, 2}, a), from_vector<std::int64_t>({n}, b), from_vector<float>({n, 1, 1}, c)),
                         from_vector<std::int64_t>({n}, y));
  CHECK(ds.num_inputs() == 3);
  for (const auto split : {1, 3}) {
    std::int64_t seen = 0;
    for (const data::Batch& batch : data::Pipeline(ds).shuffle(4).batch(5).prefetch(1).split(split, split - 1)) {
      REQUIRE(batch.num_inputs() == 3);
      CHECK(batch.input(1).dim(0) == batch.size);
      CHECK(batch.input(2).shape() == Shape{batch.size, 1, 1});
      for (std::int64_t r = 0; r < batch.size; ++r) {  // every input's row r is the same example
        const std::int64_t i = batch.y.data<std::int64_t>()[r];
        CHECK(batch.x.data<float>()[2 * r + 1] == static_cast<float>(i));
        CHECK(batch.input(1).data<std::int64_t>()[r] == i);
        CHECK(batch.input(2).data<float>()[r] == static_cast<float>(i));
      }
      seen += batch.size;
    }
    CHECK(seen == (split == 1 ? n : 5));  // the last of 3 parts: 1 row of each batch of 5, 5, 5, 5, 3 rows
  }
  CHECK_THROWS_WITH_AS(data::Batch().input(1), doctest::Contains("the dataset has 1 input(s)"), invalid_argument);

  // Without labels: batches have no y; a padded remainder needs labels and says so.
  data::TensorDataset unlabelled(data::Inputs(from_vector<float>({n, 2}, a)));
  std::int64_t rows = 0;
  for (const data::Batch& batch : data::Pipeline(unlabelled).batch(10)) {
    CHECK(!batch.y.defined());
    rows += batch.size;
  }
  CHECK(rows == n);
  CHECK_THROWS_WITH_AS(data::Pipeline(unlabelled).batch(10, data::Remainder::pad), doctest::Contains("no labels"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(data::TensorDataset(data::Inputs(from_vector<float>({n, 2}, a), zeros({n - 1}))),
                       doctest::Contains("input 1 differs in count"), invalid_argument);
  CHECK_THROWS_WITH_AS(data::TensorDataset(zeros({3, 2}), Tensor()), doctest::Contains("TensorDataset(Inputs(x))"),
                       invalid_argument);
}

TEST_CASE("Data.Pipeline.MapChangesBatchRowsNotTheDataset") {
  using namespace strata;
  // x[i] = i; the maps scale it and add noise drawn from the example's seed, then record the
  // index in the second input. The noise an example gets must depend on (seed, epoch, index)
  // only: the same for batches of 7 or 13, split 3 ways, prefetched or not.
  const std::int64_t n = 40;
  std::vector<float> xs(n);
  for (std::int64_t i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
  data::TensorDataset ds(data::Inputs(from_vector<float>({n}, xs), zeros({n, 2})), from_vector<std::int64_t>({n}, std::vector<std::int64_t>(n, 1)));
  auto mapped = [&](const data::Pipeline& p) {
    return p.map([](data::Example& e) { e.x.data<float>()[0] *= 10; })
        .map([](data::Example& e) {
          Generator g(e.seed);
          e.x.data<float>()[0] += static_cast<float>(g.below(1000)) / 1000.0f;
          e.input(1).data<float>()[0] = static_cast<float>(e.index);
          e.input(1).data<float>()[1] = static_cast<float>(e.epoch);
        }, 99);
  };
  // What each example became, by index, over two epochs.
  auto collect = [&](data::Pipeline p) {
    std::vector<std::vector<float>> by_index(2, std::vector<float>(n, -1));
    for (int epoch = 0; epoch < 2; ++epoch)
      for (const data::Batch& b : p)
        for (std::int64_t r = 0; r < b.size - b.padding; ++r) {
          const auto i = static_cast<std::int64_t>(b.input(1).data<float>()[2 * r]);
          CHECK(b.input(1).data<float>()[2 * r + 1] == static_cast<float>(epoch));
          by_index[static_cast<std::size_t>(epoch)][static_cast<std::size_t>(i)] = b.x.data<float>()[r];
        }
    return by_index;
  };
  const auto base = collect(mapped(data::Pipeline(ds).shuffle(1).batch(7)));
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = base[0][static_cast<std::size_t>(i)];
    CHECK(v >= 10.0f * static_cast<float>(i));  // scaled, then noise in [0, 1)
    CHECK(v < 10.0f * static_cast<float>(i) + 1.0f);
  }
  CHECK(base[0] != base[1]);  // another epoch, other noise
  CHECK(collect(mapped(data::Pipeline(ds).shuffle(1).batch(13).prefetch(2))) == base);
  // Split 3 ways, each part maps its own rows: together, the same examples alike.
  auto merged = std::vector<std::vector<float>>(2, std::vector<float>(n, -1));
  for (int part = 0; part < 3; ++part) {
    const auto got = collect(mapped(data::Pipeline(ds).shuffle(1).batch(7).split(3, part)));
    for (std::size_t e = 0; e < 2; ++e)
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
        if (got[e][i] != -1) merged[e][i] = got[e][i];
  }
  CHECK(merged == base);
  // The dataset's own values are unchanged.
  CHECK(ds.x.to_vector<float>() == xs);
  // Padding rows are no examples: left as padding (zeros).
  for (const data::Batch& b : mapped(data::Pipeline(ds).batch(16, data::Remainder::pad)))
    for (std::int64_t r = b.size - b.padding; r < b.size; ++r) CHECK(b.x.data<float>()[r] == 0.0f);
}

TEST_CASE("Data.Text.CorpusWindowsAndTheFortunes") {
  const strata::data::CharCorpus corpus("abracadabra!");
  CHECK(corpus.vocabulary == std::vector<unsigned char>{'!', 'a', 'b', 'c', 'd', 'r'});
  CHECK(corpus.decode(corpus.tokens) == "abracadabra!");
  CHECK_THROWS_WITH_AS(corpus.decode(std::vector<std::int64_t>{6}), doctest::Contains("outside a vocabulary of 6"),
                       strata::invalid_argument);
  // 12 tokens, context 5: two windows (the next token of the second is the 11th).
  const auto windows = strata::data::next_token_windows(corpus.tokens, 5);
  REQUIRE(windows.size() == 2);
  const auto x = windows.x.to_vector<std::int64_t>(), y = windows.y.to_vector<std::int64_t>();
  CHECK(corpus.decode(x) == "abracadabr");
  CHECK(corpus.decode(y) == "bracadabra");
  CHECK_THROWS_WITH_AS(strata::data::next_token_windows(corpus.tokens, 12), doctest::Contains("hold no window"),
                       strata::invalid_argument);
  // The reference corpus: Debian's fortunes, text only.
  const std::string text = strata::data::fortunes_text();
  CHECK(text.size() > 2'000'000);
  CHECK(text.find('%') != std::string::npos);  // the fortunes' separator
  const strata::data::CharCorpus fortunes(text);
  CHECK(fortunes.vocabulary_size() > 60);
  CHECK(fortunes.vocabulary_size() < 256);
  CHECK_THROWS_WITH_AS(strata::data::fortunes_text("/nonexistent"), doctest::Contains("apt-get install fortunes"),
                       strata::data_error);
}

TEST_CASE("Data.Words.CorpusSkipGramRowsAndBigramBuckets") {
  const strata::data::WordCorpus corpus("The cat sat. the cat ran; a dog's day, THE end", 1);
  // By descending count, ties in byte order: the(3) cat(2) then a, day, dog's, end, ran, sat.
  REQUIRE(corpus.vocabulary_size() == 8);
  CHECK(corpus.word(0) == "the");
  CHECK(corpus.word(1) == "cat");
  CHECK(corpus.id("dog's") == 4);
  CHECK(corpus.id("bird") == -1);
  const std::vector<std::int64_t> tokens(corpus.tokens().begin(), corpus.tokens().end());
  CHECK(tokens == std::vector<std::int64_t>{0, 1, 7, 0, 1, 6, 2, 4, 3, 0, 5});
  CHECK(strata::data::WordCorpus("a b a c", 2).tokens().size() == 2);  // b and c seen once: left out

  strata::Generator g1(4), g2(4);
  const std::span<const std::int64_t> few(tokens.data(), 4);  // the cat sat the
  const Tensor rows = strata::data::skip_gram_rows(few, corpus.counts(), 1, 2, g1);
  const Tensor with_bigrams = strata::data::skip_gram_rows(few, corpus.counts(), 1, 2, g2, 1000);
  // Pairs within one word: 1 + 2 + 2 + 1; [center, context, 2 negatives] (+ the bigram's bucket).
  REQUIRE(rows.shape() == strata::Shape{6, 4});
  REQUIRE(with_bigrams.shape() == strata::Shape{6, 5});
  const auto r = rows.to_vector<std::int64_t>(), b = with_bigrams.to_vector<std::int64_t>();
  const std::int64_t pairs[6][2] = {{0, 1}, {1, 0}, {1, 7}, {7, 1}, {7, 0}, {0, 7}};
  const std::int64_t previous[6] = {-1, 0, 0, 1, 1, 7};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(r[i * 4] == pairs[i][0]);
    CHECK(r[i * 4 + 1] == pairs[i][1]);
    for (std::size_t c = 0; c < 4; ++c) CHECK(b[i * 5 + c] == r[i * 4 + c]);  // the same draws
    for (std::size_t c = 2; c < 4; ++c) CHECK((r[i * 4 + c] >= 0 && r[i * 4 + c] < 8));
    CHECK(b[i * 5 + 4] == strata::data::bigram_bucket(previous[i], pairs[i][0], 1000));
  }
  // The bucket: a fixed hash of the bigram, spread over the buckets.
  CHECK(strata::data::bigram_bucket(3, 5, 1 << 20) == strata::data::bigram_bucket(3, 5, 1 << 20));
  CHECK(strata::data::bigram_bucket(3, 5, 1 << 20) != strata::data::bigram_bucket(5, 3, 1 << 20));
  std::set<std::int64_t> seen;
  for (std::int64_t a = 0; a < 100; ++a)
    for (std::int64_t w = 0; w < 100; ++w) {
      const std::int64_t k = strata::data::bigram_bucket(a, w, 1 << 20);
      CHECK((k >= 0 && k < (1 << 20)));
      seen.insert(k);
    }
  CHECK(seen.size() > 9950);  // 10 000 bigrams in 1 M buckets: few collisions
  strata::Generator g3(1);
  CHECK_THROWS_WITH_AS(strata::data::skip_gram_rows(few, corpus.counts(), 1, 2, g3, -1),
                       doctest::Contains("bigram_buckets -1 is negative"), strata::invalid_argument);
}

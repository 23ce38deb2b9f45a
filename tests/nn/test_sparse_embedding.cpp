// Row-sparse embedding gradients (docs/design/sparse_tables.md) against the dense gradient of the
// same lookups: the same rows, bit for bit, however the lookups and passes combine.
#include "doctest.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include <strata/strata.hpp>

using strata::Tensor;
using strata::TableGradient;

namespace {

Tensor table(std::int64_t rows, std::int64_t width, std::uint64_t seed, strata::DType dt = strata::DType::f32) {
  strata::Generator g(seed);
  return strata::uniform({rows, width}, -1, 1, g, dt).requires_grad_();
}

Tensor idx64(const std::vector<std::int64_t>& v) {
  return strata::from_vector<std::int64_t>({static_cast<std::int64_t>(v.size())}, v);
}

// A fixed weight per output element, so that every row's gradient differs.
Tensor weigh_rows(const Tensor& y, std::uint64_t seed = 5) {
  strata::Generator g(seed);
  return strata::sum(y * strata::uniform(y.shape(), 0.5, 1.5, g, y.dtype()));
}

// The dense gradient a row-sparse one stands for, built from its rows alone.
std::vector<float> expand(const strata::RowGrad& rg, std::int64_t rows, std::int64_t width) {
  std::vector<float> d(static_cast<std::size_t>(rows * width), 0.0f);
  const auto ix = rg.indices.to_vector<std::int64_t>();
  const auto v = rg.rows.to_vector<float>();
  for (std::size_t j = 0; j < ix.size(); ++j)
    for (std::int64_t c = 0; c < width; ++c)
      d[static_cast<std::size_t>(ix[j] * width + c)] = v[j * static_cast<std::size_t>(width) + static_cast<std::size_t>(c)];
  return d;
}

// The gradient of `loss(w, g)` with respect to a copy of `w0`, with lookups of gradient form `g`.
template <class F>
Tensor gradient_of(const Tensor& w0, TableGradient g, F&& loss) {
  Tensor w = w0.clone().requires_grad_();
  strata::backward(loss(w, g));
  return w;
}

}  // namespace

TEST_CASE("SparseEmbedding: the rows of a row-sparse gradient are the dense gradient's, duplicates combined") {
  const Tensor w0 = table(10, 3, 1);
  for (const Tensor& idx : {idx64({3, 1, 3, 7, 1, 3}),
                            strata::from_vector<std::int32_t>({2, 3}, {3, 1, 3, 7, 1, 3}, strata::DType::i32)}) {
    auto loss = [&](const Tensor& w, TableGradient g) { return weigh_rows(strata::embedding(w, idx, g)); };
    const Tensor dense = gradient_of(w0, TableGradient::dense, loss);
    const Tensor sparse = gradient_of(w0, TableGradient::row_sparse, loss);
    REQUIRE(sparse.has_row_grad());
    CHECK_FALSE(dense.has_row_grad());
    const strata::RowGrad rg = sparse.row_grad();
    CHECK(rg.indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 3, 7});  // ascending, distinct
    CHECK(rg.rows.shape() == strata::Shape{3, 3});
    CHECK(expand(rg, 10, 3) == dense.grad().to_vector<float>());  // bit for bit
    CHECK(sparse.impl()->ag.row_sparse);
    // grad() answers dense, and the gradient stays dense from then on.
    CHECK(sparse.grad().to_vector<float>() == dense.grad().to_vector<float>());
    CHECK_FALSE(sparse.has_row_grad());
  }
}

TEST_CASE("SparseEmbedding: two lookups of one table, a dense use beside them, a computed table") {
  const Tensor w0 = table(8, 4, 2);
  const Tensor a = idx64({0, 5, 5, 2}), b = idx64({5, 6, 0});
  SUBCASE("two row-sparse lookups in one pass: their rows combined") {
    auto loss = [&](const Tensor& w, TableGradient g) {
      return weigh_rows(strata::embedding(w, a, g), 1) + weigh_rows(strata::embedding(w, b, g), 2);
    };
    const Tensor dense = gradient_of(w0, TableGradient::dense, loss);
    const Tensor sparse = gradient_of(w0, TableGradient::row_sparse, loss);
    REQUIRE(sparse.has_row_grad());
    CHECK(sparse.row_grad().indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 5, 6});
    CHECK(expand(sparse.row_grad(), 8, 4) == dense.grad().to_vector<float>());
  }
  SUBCASE("a dense use of the table in the same pass: the gradient becomes dense, and right") {
    const Tensor x = table(3, 8, 3).detach();
    for (bool dense_first : {false, true}) {
      auto loss = [&](const Tensor& w, TableGradient g) {
        const Tensor lookup = weigh_rows(strata::embedding(w, a, g), 1);
        const Tensor product = weigh_rows(strata::matmul(x, w), 2);
        return dense_first ? product + lookup : lookup + product;
      };
      const Tensor dense = gradient_of(w0, TableGradient::dense, loss);
      const Tensor sparse = gradient_of(w0, TableGradient::row_sparse, loss);
      INFO("dense use recorded first: ", dense_first);
      CHECK_FALSE(sparse.has_row_grad());
      const auto got = sparse.grad().to_vector<float>(), want = dense.grad().to_vector<float>();
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  }
  SUBCASE("a computed table (not a leaf): its gradient flows on dense") {
    auto loss = [&](const Tensor& w, TableGradient g) { return weigh_rows(strata::embedding(w * 3.0, a, g)); };
    const Tensor dense = gradient_of(w0, TableGradient::dense, loss);
    const Tensor sparse = gradient_of(w0, TableGradient::row_sparse, loss);
    CHECK_FALSE(sparse.has_row_grad());
    CHECK(sparse.grad().to_vector<float>() == dense.grad().to_vector<float>());
  }
  SUBCASE("no index at all: an empty row-sparse gradient") {
    const Tensor none = strata::from_vector<std::int64_t>({0}, {});
    Tensor w = w0.clone().requires_grad_();
    strata::backward(strata::sum(strata::embedding(w, none, TableGradient::row_sparse)) + strata::sum(w0.detach()) * 0.0);
    CHECK(w.row_grad().size() == 0);
    CHECK(w.grad().to_vector<float>() == std::vector<float>(32, 0.0f));
  }
}

TEST_CASE("SparseEmbedding: passes overwrite or accumulate rows as they do dense gradients") {
  const Tensor w0 = table(6, 2, 4);
  const Tensor a = idx64({1, 4}), b = idx64({4, 0, 0});
  auto two_passes = [&](TableGradient g, strata::GradAccumulation second) {
    Tensor w = w0.clone().requires_grad_();
    const std::vector<Tensor> params{w};
    (void)strata::grad(weigh_rows(strata::embedding(w, a, g), 1), params);
    (void)strata::grad(weigh_rows(strata::embedding(w, b, g), 2), params, second);
    return w;
  };
  for (auto mode : {strata::GradAccumulation::overwrite, strata::GradAccumulation::accumulate}) {
    const Tensor dense = two_passes(TableGradient::dense, mode);
    const Tensor sparse = two_passes(TableGradient::row_sparse, mode);
    INFO("accumulate: ", mode == strata::GradAccumulation::accumulate);
    REQUIRE(sparse.has_row_grad());
    CHECK(sparse.row_grad().indices.to_vector<std::int64_t>() ==
          (mode == strata::GradAccumulation::accumulate ? std::vector<std::int64_t>{0, 1, 4} : std::vector<std::int64_t>{0, 4}));
    CHECK(expand(sparse.row_grad(), 6, 2) == dense.grad().to_vector<float>());
  }
  SUBCASE("a pass that does not reach the table leaves it a zero gradient, not the last rows") {
    Tensor w = w0.clone().requires_grad_();
    Tensor other = table(2, 2, 5);
    const std::vector<Tensor> params{w, other};
    (void)strata::grad(weigh_rows(strata::embedding(w, a, TableGradient::row_sparse)), params);
    REQUIRE(w.has_row_grad());
    (void)strata::grad(weigh_rows(other), params);
    CHECK(w.row_grad().size() == 0);  // zero: no rows
    CHECK(w.grad().to_vector<float>() == std::vector<float>(12, 0.0f));
  }
}

TEST_CASE("SparseEmbedding: a hook sees the gradient dense, and it stays so") {
  Tensor w = table(5, 2, 6);
  std::vector<float> seen;
  w.register_hook([&](const Tensor& g) { seen = g.to_vector<float>(); });
  strata::backward(weigh_rows(strata::embedding(w, idx64({2, 2, 4}), TableGradient::row_sparse)));
  CHECK_FALSE(w.has_row_grad());
  REQUIRE(seen.size() == 10);
  CHECK(seen == w.grad().to_vector<float>());
  CHECK(seen[0] == 0.0f);
  CHECK(seen[4] != 0.0f);
}

TEST_CASE("SparseEmbedding: nn::Embedding with row-sparse gradients") {
  strata::Generator g1(7), g2(7);
  strata::nn::Embedding dense(9, 4, g1), sparse(9, 4, g2, strata::DType::f32, TableGradient::row_sparse);
  CHECK(sparse.gradient() == TableGradient::row_sparse);
  CHECK(sparse.weight().impl()->ag.row_sparse);
  CHECK_FALSE(dense.weight().impl()->ag.row_sparse);
  const Tensor idx = strata::from_vector<std::int64_t>({2, 2}, {8, 3, 3, 0});
  strata::backward(weigh_rows(dense(idx)));
  strata::backward(weigh_rows(sparse(idx)));
  REQUIRE(sparse.weight().has_row_grad());
  CHECK(expand(sparse.weight().row_grad(), 9, 4) == dense.weight().grad().to_vector<float>());
}

// A table whose values live elsewhere (a parameter server's remote table): embedding() asks
// its RowSource for the rows, in the lookup's order, and never reads the table's memory.
TEST_CASE("SparseEmbedding: a table with a RowSource is read through it") {
  struct Doubled final : strata::RowSource {  // row r of the "real" table: r, 2r, 3r
    std::vector<std::vector<std::int64_t>> asked;
    void gather(const Tensor& table, std::span<const std::int64_t> rows, void* out) override {
      asked.emplace_back(rows.begin(), rows.end());
      auto* o = static_cast<float*>(out);
      for (std::size_t k = 0; k < rows.size(); ++k)
        for (std::int64_t c = 0; c < table.dim(1); ++c)
          o[k * 3 + static_cast<std::size_t>(c)] = static_cast<float>(rows[k] * (c + 1));
    }
  } source;
  Tensor w = strata::zeros({6, 3});  // its memory: zeros, never read
  w.requires_grad_(true);
  w.impl()->ag.row_source = &source;
  const Tensor idx = strata::from_vector<std::int32_t>({2, 2}, {5, 1, 1, 4});
  const Tensor out = strata::embedding(w, idx, TableGradient::row_sparse);
  CHECK(out.shape() == strata::Shape{2, 2, 3});
  CHECK(out.to_vector<float>() == std::vector<float>{5, 10, 15, 1, 2, 3, 1, 2, 3, 4, 8, 12});
  REQUIRE(source.asked.size() == 1);
  CHECK(source.asked[0] == std::vector<std::int64_t>{5, 1, 1, 4});
  // The gradient is the rows' as ever; an index out of range is refused before the source is asked.
  strata::backward(strata::sum(out));
  REQUIRE(w.has_row_grad());
  CHECK(w.row_grad().indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 4, 5});
  CHECK_THROWS_WITH_AS(strata::embedding(w, strata::from_vector<std::int64_t>({1}, {6})),
                       doctest::Contains("index 6 at position 0 is out of range for a table of 6 rows"),
                       strata::invalid_argument);
  CHECK(source.asked.size() == 1);
  w.impl()->ag.row_source = nullptr;
  CHECK(strata::embedding(w, idx).to_vector<float>() == std::vector<float>(12, 0.0f));
}

// The reducer on its own, knowing no strategy: ranks as threads of one InProcess group, each
// with its own copy of a model and its own rows, the gradient engine all-reducing during
// backward. Every rank ends with the serial float64 sum of the ranks' own gradients, whatever
// the bucket size, with a parameter that gets no gradient in the pass among them.
#include "doctest.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <thread>
#include <vector>

#include <strata/autograd/backward.hpp>
#include <strata/autograd/grad_mode.hpp>
#include <strata/collective/in_process.hpp>
#include <strata/nn/layers.hpp>
#include <strata/nn/sequential.hpp>
#include <strata/ops/reduce.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/tensor/factory.hpp>

namespace {

using strata::Tensor;

strata::nn::Sequential small_mlp() {
  strata::nn::Sequential m;
  m.add(strata::nn::Linear(6, 16));
  m.add(strata::nn::Tanh());
  m.add(strata::nn::Linear(16, 3));
  return m;
}

// Rank r's rows: distinct values on every rank, so a missing or doubled rank shows.
Tensor rows_of(int r, std::int64_t n) {
  Tensor x = strata::zeros({n, 6});
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) p[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r));
  return x;
}

// n copies of one model (the same parameters).
std::vector<strata::nn::Sequential> copies(int n) {
  std::vector<strata::nn::Sequential> out;
  for (int r = 0; r < n; ++r) out.push_back(small_mlp());
  strata::NoGradGuard no_grad;
  for (int r = 1; r < n; ++r)
    for (std::size_t k = 0; k < out[0].parameters().size(); ++k) {
      Tensor dst = out[static_cast<std::size_t>(r)].parameters()[k];
      dst.copy_(out[0].parameters()[k]);
    }
  return out;
}

// Rank r's loss over its rows (3 + r of them: the ranks' batches differ in size too).
Tensor loss_of(strata::nn::Sequential& m, int r) { return strata::sum(m(rows_of(r, 3 + r))); }

}  // namespace

TEST_CASE("Reducer.GradientEngine.EveryRankHoldsTheSerialSumOverInProcessThreads") {
  for (int n : {2, 3}) {
    for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
      CAPTURE(n);
      CAPTURE(bucket_bytes);
      // 2n copies of one model: the first n for the reference, the others for the engine.
      auto all = copies(2 * n);
      // The reference: each rank's own gradient, alone, summed in float64.
      std::vector<strata::nn::Sequential> alone(std::make_move_iterator(all.begin()), std::make_move_iterator(all.begin() + n));
      std::vector<std::vector<double>> want;
      for (int r = 0; r < n; ++r) {
        auto& m = alone[static_cast<std::size_t>(r)];
        strata::grad(loss_of(m, r), m.parameters());
        for (std::size_t k = 0; k < m.parameters().size(); ++k) {
          const Tensor g = m.parameters()[k].grad();
          if (want.size() <= k) want.emplace_back(static_cast<std::size_t>(g.numel()), 0.0);
          for (std::int64_t i = 0; i < g.numel(); ++i) want[k][static_cast<std::size_t>(i)] += g.data<float>()[i];
        }
      }
      // The engine: one thread a rank, each with its copy and its rows, plus a parameter of
      // its own that no loss reads (finish() starts its bucket).
      std::vector<strata::nn::Sequential> models(std::make_move_iterator(all.begin() + n), std::make_move_iterator(all.end()));
      auto comms = strata::collective::InProcess::make_group(n);
      std::vector<std::vector<double>> got(static_cast<std::size_t>(n));
      std::vector<double> spare(static_cast<std::size_t>(n), -1);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          auto& m = models[static_cast<std::size_t>(r)];
          std::vector<Tensor> params = m.parameters();
          Tensor unused = strata::full({4}, 1.0);
          unused.requires_grad_(true);
          params.push_back(unused);
          strata::GradientEngine<strata::collective::InProcess> engine(comms[static_cast<std::size_t>(r)], params,
                                                                       bucket_bytes);
          strata::grad(loss_of(m, r), params);
          engine.finish();
          for (std::size_t k = 0; k + 1 < params.size(); ++k) {
            const Tensor g = params[k].grad();
            for (std::int64_t i = 0; i < g.numel(); ++i) got[static_cast<std::size_t>(r)].push_back(g.data<float>()[i]);
          }
          const Tensor gu = unused.grad();
          spare[static_cast<std::size_t>(r)] = gu.defined() ? std::abs(gu.data<float>()[0]) : 0.0;
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        std::size_t at = 0;
        double worst = 0;
        for (const auto& w : want)
          for (double v : w) worst = std::max(worst, std::abs(got[static_cast<std::size_t>(r)][at++] - v) / (1 + std::abs(v)));
        CHECK(at == got[static_cast<std::size_t>(r)].size());
        CHECK(worst < 1e-6);
        CHECK(got[static_cast<std::size_t>(r)] == got[0]);  // the same bits on every rank
        CHECK(spare[static_cast<std::size_t>(r)] == 0.0);   // no gradient: zeros, summed
      }
    }
  }
}

#include "doctest.hpp"

#include <strata/strata.hpp>

using strata::Tensor;

static_assert(strata::Strategy<strata::OneDeviceStrategy>);
static_assert(!strata::Strategy<int>);

TEST_CASE("Strategy.OneDevice.RunAndReduce") {
  strata::OneDeviceStrategy s;
  CHECK(s.num_replicas_in_sync() == 1);
  CHECK(s.is_chief());
  auto ids = s.run([](strata::ReplicaContext& ctx) {
    return static_cast<double>(ctx.replica_id_in_sync_group() * 10 + ctx.num_replicas_in_sync());
  });
  CHECK(ids.size() == 1);
  CHECK(s.reduce(strata::ReduceOp::Sum, ids) == 1.0);
  CHECK_THROWS_AS(strata::OneDeviceStrategy(strata::Device::cuda(0)), strata::invalid_argument);
}

TEST_CASE("Strategy.OneDevice.StepEqualsAPlainStep") {
  // The same SGD step, once through the strategy and once by hand, from the same start.
  strata::Generator g(5);
  Tensor x = strata::uniform({6, 4}, -1, 1, g);
  Tensor y = strata::from_vector<std::int64_t>({6}, {0, 1, 2, 0, 1, 2});
  strata::data::Pipeline pipe(strata::data::TensorDataset(x, y));
  pipe = pipe.batch(6);

  auto make = [] {
    strata::manual_seed(11);
    return strata::nn::Sequential(strata::nn::Linear(4, 8), strata::nn::ReLU(), strata::nn::Linear(8, 3));
  };
  strata::OneDeviceStrategy s;
  auto model = s.scope(make);
  auto opt = s.scope([&] { return strata::optim::Sgd(model.parameters(), 0.1, 0.9); });
  double loss = 0;
  for (auto& batch : s.distribute(pipe)) {
    auto losses = s.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      auto l = strata::nn::cross_entropy(model(b.x), b.y, strata::nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, strata::grad(l, model.parameters()));
      return l;
    }, batch);
    loss = s.reduce(strata::ReduceOp::Sum, losses).item();
  }

  auto ref = make();
  strata::optim::Sgd ref_opt(ref.parameters(), 0.1, 0.9);
  auto l = strata::nn::cross_entropy(ref(x), y);
  ref_opt.apply_gradients(strata::grad(l, ref.parameters()));
  CHECK(loss == doctest::Approx(l.item()).epsilon(1e-6));
  for (std::size_t i = 0; i < ref.parameters().size(); ++i) {
    const auto a = model.parameters()[i].to_vector<float>(), b = ref.parameters()[i].to_vector<float>();
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(a[k] == doctest::Approx(b[k]).epsilon(1e-6));
  }
}

TEST_CASE("Strategy.OneDevice.CudaWithoutKernelsIsAClearError") {
  // This program has no nvcc-compiled translation unit: a cuda device cannot be used.
  CHECK_THROWS_WITH_AS(strata::OneDeviceStrategy(strata::Device::cuda(0)),
                       doctest::Contains("this program has no CUDA kernels"), strata::invalid_argument);
}

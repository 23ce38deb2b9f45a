// A regression on in-memory arrays with your own loss: the per-example Huber losses, averaged
// over the global batch with compute_average_loss, trained under MirroredStrategy with 3
// replicas on a global batch of 32 (11, 11 and 10 rows). The same loop under
// OneDeviceStrategy ends with the same weights: the replicas' gradients are summed, and each
// replica's loss is its rows' share of the global mean.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <strata/strata.hpp>

// y = x . (1, -2, 0.5) + 0.3, with noise.
strata::data::TensorDataset make_data() {
  strata::Generator g(42);
  strata::Tensor x = strata::uniform({1000, 3}, -1, 1, g);
  strata::Tensor noise = strata::normal({1000, 1}, 0, 0.05, g);
  strata::Tensor w = strata::from_vector<float>({3, 1}, {1.0f, -2.0f, 0.5f});
  strata::Tensor y = strata::add(strata::add(strata::matmul(x, w), 0.3), noise);
  return strata::data::TensorDataset(x, y);
}

template <strata::Strategy S>
std::vector<float> train(S& strategy) {
  strata::manual_seed(0);
  auto model = strategy.scope([] { return strata::nn::Linear(3, 1); });
  auto opt = strategy.scope([&] { return strata::optim::Sgd(model.parameters(), 0.1, 0.9); });
  auto data = strategy.distribute(strata::data::Pipeline(make_data()).shuffle(0).batch(32));
  double loss = 0;
  for (auto& batch : data) {
    auto losses = strategy.run([&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
      strata::Tensor per_example = strata::nn::huber_loss(model(b.x), b.y, 1.0, strata::nn::Reduction::none);
      strata::Tensor l = strata::compute_average_loss(per_example, b);
      opt.apply_gradients(ctx, strata::grad(l, model.parameters()));
      return l;
    }, batch);
    loss = strategy.reduce(strata::ReduceOp::Sum, losses).item();
  }
  const strata::Tensor weight = model.parameters()[0], bias = model.parameters()[1];
  std::vector<float> w = weight.to_vector<float>();
  std::printf("%-20s last loss %.5f  weights %.4f %.4f %.4f  bias %.4f\n", strategy.name, loss, w[0], w[1], w[2],
              bias.item());
  return w;
}

int main() {
  try {
    strata::OneDeviceStrategy one;
    strata::MirroredStrategy<> mirrored(3);
    const auto a = train(one), b = train(mirrored);
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    std::printf("largest weight difference between the two: %.2g\n", worst);
    return worst < 1e-4 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "09_regression_losses: %s\n", e.what());
    return 1;
  }
}

// Your own input under MultiWorkerMirroredStrategy over MPI: each worker makes its own part of
// the data (as if it read its own files), with two inputs — 8 measurements and a one-hot group
// of 4 — and a target, no class labels. A per-example map standardises the measurements and
// adds noise drawn from the example's own seed; the per-worker input function batches this
// worker's share of each global batch of 64. The workers' parts differ in size, so the one
// that ends first joins the others with empty batches until all are done.
//
//   mpirun -np 2 build/examples/11_your_own_input
//   (as root add --allow-run-as-root; with more processes than cores, --oversubscribe)
#include <cstdio>
#include <exception>

#include <strata/collective/mpi.hpp>
#include <strata/strata.hpp>

using namespace strata;

// A worker's part: 500 + 40 * worker examples of y = w . x + g(group), in raw units.
data::TensorDataset my_part(int worker) {
  Generator gen(100 + static_cast<std::uint64_t>(worker));
  const std::int64_t n = 500 + 40 * worker;
  Tensor x = add(mul(uniform({n, 8}, -1, 1, gen), 50.0), 20.0);  // measurements around 20, spread 50
  Tensor group = zeros({n, 4});
  for (std::int64_t i = 0; i < n; ++i) group.data<float>()[i * 4 + static_cast<std::int64_t>(gen.below(4))] = 1;
  Tensor w = from_vector<float>({8, 1}, {0.5f, -1, 0.25f, 0, 2, -0.5f, 1, 0.75f});
  Tensor offsets = from_vector<float>({4, 1}, {1, -2, 3, 0});
  Tensor y = add(matmul(mul(add(x, -20.0), 0.02), w), matmul(group, offsets));
  return data::TensorDataset(data::Inputs(x, group, y));  // inputs 0 and 1, the target as input 2; no labels
}

// A model of two inputs: out = dense(x) + embed(group).
class Regression : public nn::Module {
 public:
  Regression() {
    dense_ = &register_module("dense", std::make_unique<nn::Linear>(8, 1));
    embed_ = &register_module("embed", std::make_unique<nn::Linear>(4, 1, /*bias=*/false));
  }
  Tensor operator()(const Tensor& x, const Tensor& group) { return add((*dense_)(x), (*embed_)(group)); }
  Tensor forward(const Tensor&) override {
    STRATA_CHECK(false, "Regression takes two inputs: model(x, group)");
    return {};
  }

 private:
  nn::Module *dense_, *embed_;
};

template <Strategy S>
void train(S& strategy) {
  auto model = strategy.scope([] { return Regression(); });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.05); });
  auto data = strategy.distribute([&](const InputContext& ctx) {
    return data::Pipeline(my_part(ctx.input_pipeline_id))
        .shuffle(1)
        .map([](data::Example& e) {  // standardise, then a little noise of the example's own
          Generator g(e.seed);
          for (std::int64_t k = 0; k < 8; ++k)
            e.x.data<float>()[k] = (e.x.data<float>()[k] - 20.0f) / 50.0f + 0.01f * static_cast<float>(g.uniform() - 0.5);
        }, /*seed=*/3)
        .batch(ctx.per_worker_batch_size(64));
  }, UnevenInputs::join);

  metrics::Mean loss;
  for (int epoch = 0; epoch < 20; ++epoch) {
    loss.reset();
    for (auto& batch : data)
      strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
        Tensor per_example = nn::mse_loss(model(b.x, b.input(1)), b.input(2), nn::Reduction::none);
        opt.apply_gradients(ctx, grad(compute_average_loss(per_example, b), model.parameters()));
        loss.update(per_example, b);
      }, batch);
    const double mean = loss.result(strategy);  // over every worker's examples
    if (strategy.is_chief() && (epoch + 1) % 5 == 0) std::printf("epoch %2d: mean squared error %.5f\n", epoch + 1, mean);
  }
}

int main() {
  try {
    MultiWorkerMirroredStrategy<collective::Mpi> strategy;
    train(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "11_your_own_input: %s\n", e.what());
    runtime::fail_job(e.what());
    return 1;
  }
}

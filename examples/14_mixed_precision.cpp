// 14 — 16-bit products: the loop of 02 under a precision policy, set once for the block as
// torch.autocast sets it. Under bfloat16 the linear layers round their operands to bfloat16
// and sum in float32; the model's variables, its gradients and the optimizer stay float32.
// float16 rounds to IEEE half precision, whose small gradients vanish unless the loss is
// scaled up: the optimizer gets a loss scale, and backward differentiates opt.scale_loss(loss).
// The optimizer divides the summed gradients by the scale, skips a step whose gradients are
// not finite (on every replica alike) and halves the scale then. bfloat16 needs no scale.
//
//   build/examples/14_mixed_precision [fp32|bf16|fp16 ...]      (default: bf16 fp16)
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train(S& strategy, precision::Policy policy) {
  const precision::Scope scope(policy);  // every replica computes under it
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 256), ReLU(), Linear(256, 10));
  });
  auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.05, {.momentum = 0.9}); });
  if (precision::needs_loss_scale(policy)) opt.set_loss_scale();  // float16: 2^16 to start
  const std::int64_t global_batch = 128;
  auto batches = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(1).batch(global_batch).take(200));

  double correct = 0, seen = 0;
  for (auto& batch : batches) {
    auto counts = strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
      Tensor logits = model(b.x);
      Tensor loss = nn::cross_entropy(logits, b.y, nn::Reduction::sum_over_global_batch, b.global_size);
      opt.apply_gradients(ctx, grad(opt.scale_loss(loss), model.parameters()));  // the loss as it is without a scale
      return static_cast<double>(count_correct(logits, b.y));
    }, batch);
    correct += strategy.reduce(ReduceOp::Sum, counts);
    seen += static_cast<double>(batch.global_size);
  }
  const optim::Sgd& replica0 = opt;
  if (strategy.is_chief())
    std::printf("%s on %d replicas: training accuracy %.2f %% over the run; loss scale %s, %lld steps skipped\n",
                precision::name_of(policy), strategy.num_replicas_in_sync(), 100.0 * correct / seen,
                replica0.loss_scale() ? std::to_string(replica0.loss_scale()->scale()).c_str() : "none",
                static_cast<long long>(replica0.skipped_steps()));
}

int main(int argc, char** argv) {
  try {
    std::vector<std::string> names(argv + 1, argv + argc);
    if (names.empty()) names = {"bf16", "fp16"};
    MirroredStrategy<> strategy(2);
    for (const std::string& name : names) train(strategy, precision::from_name(name));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "14_mixed_precision: %s\n", e.what());
    return 1;
  }
}

// Streaming metrics and distributed evaluation: a training loop that keeps its own loss and
// accuracy per epoch, then an evaluation of the test set. Each replica adds its rows to the
// metrics inside run(); a metric's result() sums every replica (and, under a multi-process
// strategy, every process), so the figures are those of the whole dataset — here 10,000 test
// images over 3 replicas, in batches that do not divide evenly.
//
//   build/examples/10_metrics_and_evaluation [replicas]      (default 3)
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <strata/strata.hpp>

using namespace strata;

template <Strategy S>
void train_and_evaluate(S& strategy) {
  auto model = strategy.scope([] {
    using namespace nn;
    return Sequential(Flatten(), Linear(784, 128), ReLU(), Dropout(0.2), Linear(128, 10));
  });
  auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 1e-3); });
  auto train = strategy.distribute(data::Pipeline(data::fashion_mnist_train()).shuffle(0).batch(100).take(150));

  metrics::Mean train_loss;
  metrics::Accuracy train_accuracy;
  for (int epoch = 0; epoch < 2; ++epoch) {
    train_loss.reset();
    train_accuracy.reset();
    for (auto& batch : train)
      strategy.run([&](ReplicaContext& ctx, const data::Batch& b) {
        Tensor logits = model(b.x);
        Tensor per_example = nn::cross_entropy(logits, b.y, nn::Reduction::none);
        opt.apply_gradients(ctx, grad(compute_average_loss(per_example, b), model.parameters()));
        train_loss.update(per_example, b);
        train_accuracy.update(logits, b.y);
      }, batch);
    const double loss = train_loss.result(strategy), accuracy = train_accuracy.result(strategy);
    if (strategy.is_chief()) std::printf("epoch %d: loss %.4f, training accuracy %.2f %%\n", epoch + 1, loss, 100 * accuracy);
  }

  // The test set, 10,000 images in batches of 384 (the last one 16): dropout is off while
  // evaluate() runs, and the model is back in training mode after it.
  metrics::Accuracy accuracy;
  metrics::ConfusionCount confusion(10);
  metrics::Mean loss;
  evaluate(strategy, model, data::Pipeline(data::fashion_mnist_test()).batch(384), accuracy, confusion,
           [&](const Tensor& logits, const data::Batch& b) {
             loss.update(nn::cross_entropy(logits, b.y, nn::Reduction::none), b);
           });
  const auto counts = accuracy.counts(strategy);
  const Tensor matrix = confusion.result(strategy);  // row: true class, column: predicted
  const double test_loss = loss.result(strategy);
  if (strategy.is_chief()) {
    std::printf("test: %lld of %lld correct (%.2f %%), loss %.4f\n", static_cast<long long>(counts.correct),
                static_cast<long long>(counts.examples), 100.0 * static_cast<double>(counts.correct) / static_cast<double>(counts.examples), test_loss);
    const char* names[] = {"T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"};
    for (int c = 0; c < 10; ++c) {
      std::int64_t row = 0;
      for (int p = 0; p < 10; ++p) row += matrix.data<std::int64_t>()[c * 10 + p];
      std::printf("  %-8s %4lld of %4lld\n", names[c], static_cast<long long>(matrix.data<std::int64_t>()[c * 10 + c]),
                  static_cast<long long>(row));
    }
  }
}

int main(int argc, char** argv) {
  try {
    MirroredStrategy<> strategy(argc > 1 ? std::atoi(argv[1]) : 3);
    train_and_evaluate(strategy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "10_metrics_and_evaluation: %s\n", e.what());
    return 1;
  }
}

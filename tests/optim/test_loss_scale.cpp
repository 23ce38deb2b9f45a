// The dynamic loss scale (optim/loss_scale.hpp) on one device: GradScaler's schedule, a scaled
// run that equals an unscaled one bit for bit (the scale is a power of two, so multiplying the
// loss and dividing the gradients are exact), a non-finite step skipped with the scale halved,
// clipping on the divided gradients, gradient accumulation, float16's products with and
// without it, and the scale through a checkpoint. Across replicas and processes:
// strategies/loss_scale_run.hpp.
#include "doctest.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <unistd.h>  // getpid
#include <vector>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/training_state.hpp>
#include <strata/strata.hpp>

using strata::Tensor;
namespace ck = strata::checkpoint;

namespace {

strata::nn::Sequential loss_scale_mlp() {
  strata::manual_seed(3);
  return strata::nn::Sequential(strata::nn::Linear(6, 8), strata::nn::ReLU(), strata::nn::Linear(8, 3));
}

strata::data::TensorDataset loss_scale_data() {
  strata::Generator g(5);
  std::vector<std::int64_t> labels(24);
  for (auto& l : labels) l = static_cast<std::int64_t>(g.below(3));
  return {strata::uniform({24, 6}, -1, 1, g), strata::from_vector<std::int64_t>({24}, labels)};
}

std::vector<std::vector<float>> loss_scale_values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

// `steps` steps of SGD with momentum on batches of 8 (the three of the data in turn, each of two
// micro-batches of 4, accumulated), clipped to [-0.05, 0.05]; with `scale`, through a loss scale that grows every 2 steps. At step
// `poison` (if any) the loss is multiplied by infinity. Returns the parameters, the momentum
// and the optimizer's step count, skipped steps and scale.
struct ScaledRun {
  std::vector<std::vector<float>> params, state;
  std::int64_t steps = 0, skipped = 0;
  double scale = 0;
};
ScaledRun train_scaled(bool scale, int steps, int poison = -1) {
  auto net = loss_scale_mlp();
  strata::optim::Sgd opt(net.parameters(), 0.1, {.momentum = 0.9});
  opt.clip_by_value(0.05);
  if (scale) opt.set_loss_scale({.growth_interval = 2});
  const auto data = loss_scale_data();
  for (int step = 0; step < steps; ++step) {
    const std::int64_t lo = (step % 3) * 8;
    strata::Gradients g{};
    for (int half = 0; half < 2; ++half) {
      Tensor loss = strata::nn::cross_entropy(net(strata::data::slice_rows(data.x, lo + 4 * half, lo + 4 * half + 4)),
                                              strata::data::slice_rows(data.y, lo + 4 * half, lo + 4 * half + 4));
      if (step == poison && half == 1) loss = strata::mul(loss, std::numeric_limits<double>::infinity());
      g = strata::grad(opt.scale_loss(loss), net.parameters(),
                       half == 0 ? strata::GradAccumulation::overwrite : strata::GradAccumulation::accumulate);
    }
    opt.apply_gradients(g);
  }
  ScaledRun r{loss_scale_values(net.parameters()), {}, opt.steps(), opt.skipped_steps(), opt.loss_scale() ? opt.loss_scale()->scale() : 0};
  for (const auto& [name, t] : opt.state()) r.state.push_back(t.to_vector<float>());
  return r;
}

}  // namespace

TEST_CASE("Optim.LossScale: GradScaler's schedule, and bad settings named") {
  strata::optim::LossScale s;
  CHECK(s.scale() == 65536.0);
  for (int i = 0; i < 1999; ++i) s.after_step(true);
  CHECK(s.scale() == 65536.0);
  CHECK(s.clean_steps() == 1999);
  s.after_step(true);  // the 2,000th finite step in a row doubles it
  CHECK(s.scale() == 131072.0);
  CHECK(s.clean_steps() == 0);
  s.after_step(true);
  s.after_step(false);  // a non-finite step halves it and starts the count again
  CHECK(s.scale() == 65536.0);
  CHECK(s.clean_steps() == 0);
  using O = strata::optim::LossScaleOptions;
  CHECK_THROWS_WITH_AS(strata::optim::LossScale(O{.initial = 0}), doctest::Contains("initial must be finite and positive"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::optim::LossScale(O{.growth_factor = 1}), doctest::Contains("growth_factor"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::optim::LossScale(O{.backoff_factor = 1}), doctest::Contains("backoff_factor"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::optim::LossScale(O{.growth_interval = 0}), doctest::Contains("growth_interval"),
                       strata::invalid_argument);
  CHECK_THROWS_WITH_AS(s.restore(-1, 0), doctest::Contains("not finite and positive"), strata::invalid_argument);
  CHECK_THROWS_WITH_AS(s.restore(1024, 2000), doctest::Contains("outside [0, growth_interval = 2000)"),
                       strata::invalid_argument);
  s.restore(1024, 7);
  CHECK(s.scale() == 1024);
  CHECK(s.clean_steps() == 7);
}

TEST_CASE("Optim.LossScale: a scaled float32 run equals the unscaled run bit for bit") {
  // Accumulated micro-batches and clipping by value included: the gradients are divided
  // before the clip reads them.
  const ScaledRun plain = train_scaled(false, 7), scaled = train_scaled(true, 7);
  CHECK(scaled.params == plain.params);
  CHECK(scaled.state == plain.state);
  CHECK(scaled.steps == 7);
  CHECK(scaled.skipped == 0);
  CHECK(scaled.scale == 65536.0 * 8);  // grown after steps 2, 4 and 6
  Tensor loss = strata::full({}, 1.5);
  CHECK(strata::optim::Sgd(loss_scale_mlp().parameters(), 0.1).scale_loss(loss).item() == 1.5);  // none: as it is
}

TEST_CASE("Optim.LossScale: a non-finite gradient skips the step and halves the scale") {
  // Step 3's gradients hold NaN or Inf: the parameters and the momentum stay as they were
  // (the run then equals one that never saw that batch, whose scale differs but is exact).
  const ScaledRun poisoned = train_scaled(true, 6, 3);
  CHECK(poisoned.skipped == 1);
  CHECK(poisoned.steps == 5);
  CHECK(poisoned.scale == 65536.0 * 2 * 0.5 * 2);  // grown after steps 0-1, halved at 3, grown after 4-5
  for (const auto& p : poisoned.params)
    for (float v : p) CHECK(std::isfinite(v));
  const ScaledRun through_three = train_scaled(true, 3);
  const ScaledRun poisoned_at_end = train_scaled(true, 4, 3);
  CHECK(poisoned_at_end.params == through_three.params);
  CHECK(poisoned_at_end.state == through_three.state);
  CHECK(poisoned_at_end.scale == through_three.scale / 2);
}

TEST_CASE("Optim.LossScale: float16's products lose small gradients the scale keeps") {
  // A loss of 1e-8 times the outputs: its gradient, 1e-8 per row, is below half of float16's
  // smallest subnormal (2^-24, 6e-8) and rounds to 0 in the products of backward; scaled by
  // 2^16 first it is 6.6e-4, and the divided gradients are float32's within float16's rounding.
  auto net = loss_scale_mlp();
  const auto data = loss_scale_data();
  const auto grads_under = [&](strata::precision::Policy p, bool scaled) {
    const strata::precision::Scope scope(p);
    strata::optim::Sgd opt(net.parameters(), 0.1);
    if (scaled) opt.set_loss_scale();
    const Tensor loss = strata::mul(strata::sum(net(data.x)), 1e-8);
    const strata::Gradients g = strata::grad(opt.scale_loss(loss), net.parameters());
    if (scaled) CHECK(strata::optim::unscale(g, opt.loss_scale()->scale()));
    return loss_scale_values(std::vector<Tensor>{g[0], g[2]});  // the two weights' gradients
  };
  const auto f32 = grads_under(strata::precision::float32, false);
  const auto f16 = grads_under(strata::precision::float16, false);
  const auto f16_scaled = grads_under(strata::precision::float16, true);
  for (float v : f16[0]) CHECK(v == 0.0f);  // the first layer's: from G W, G rounded to 0
  double worst = 0, largest = 0;
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t i = 0; i < f32[t].size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(f16_scaled[t][i]) - f32[t][i]));
      largest = std::max(largest, std::abs(static_cast<double>(f32[t][i])));
    }
  CHECK(largest > 0);
  CHECK(worst <= 4e-3 * largest);  // a few roundings of 2^-11
}

TEST_CASE("Optim.LossScale: a scale too large for float16 backs off until its products fit") {
  // 2^40 times the loss's gradient is past float16's 65504: the products are infinite, the
  // steps skipped, the scale halved each time until they fit; then training goes ahead.
  const strata::precision::Scope fp16(strata::precision::float16);
  auto net = loss_scale_mlp();
  strata::optim::Sgd opt(net.parameters(), 0.1);
  opt.set_loss_scale({.initial = std::ldexp(1.0, 40)});
  const auto data = loss_scale_data();
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    const Tensor loss = strata::nn::cross_entropy(net(data.x), data.y);
    (step == 0 ? first : last) = loss.item();
    opt.apply_gradients(strata::grad(opt.scale_loss(loss), net.parameters()));
  }
  CHECK(opt.skipped_steps() >= 20);  // 2^40 to below 2^20, where the largest gradient is under 65504
  CHECK(opt.steps() == 40 - opt.skipped_steps());
  CHECK(opt.loss_scale()->scale() == std::ldexp(1.0, 40 - static_cast<int>(opt.skipped_steps())));
  CHECK(opt.steps() > 0);
  CHECK(last < first);
}

TEST_CASE("Optim.LossScale: a checkpoint holds the scale, and a resumed float16 run is bitwise") {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_loss_scale_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto data = loss_scale_data();
  // Steps [from, to) of a float16 run, on batch `step` of 8; poisoned at step 2.
  const auto train = [&](strata::nn::Sequential& net, strata::optim::Optimizer& opt, int from, int to) {
    const strata::precision::Scope fp16(strata::precision::float16);
    for (int step = from; step < to; ++step) {
      const std::int64_t lo = (step % 3) * 8;
      Tensor loss = strata::nn::cross_entropy(net(strata::data::slice_rows(data.x, lo, lo + 8)),
                                              strata::data::slice_rows(data.y, lo, lo + 8));
      if (step == 2) loss = strata::mul(loss, std::numeric_limits<double>::infinity());
      opt.apply_gradients(strata::grad(opt.scale_loss(loss), net.parameters()));
    }
  };
  auto straight = loss_scale_mlp();
  strata::optim::Adam opt_straight(straight.parameters(), 0.01);
  opt_straight.set_loss_scale({.growth_interval = 3});
  train(straight, opt_straight, 0, 9);

  auto first = loss_scale_mlp();
  strata::optim::Adam opt_first(first.parameters(), 0.01);
  opt_first.set_loss_scale({.growth_interval = 3});
  train(first, opt_first, 0, 5);
  const auto path = dir / "c.strata";
  ck::write_checkpoint(path, ck::capture_training_state(first.parameters(), opt_first, {5, 0, 0}, 1));
  CHECK(opt_first.loss_scale()->clean_steps() == 2);  // steps 3 and 4 since step 2 halved it

  strata::manual_seed(99);  // other initial values: the checkpoint's must replace them
  auto resumed = strata::nn::Sequential(strata::nn::Linear(6, 8), strata::nn::ReLU(), strata::nn::Linear(8, 3));
  strata::optim::Adam opt_resumed(resumed.parameters(), 0.01);
  opt_resumed.set_loss_scale({.growth_interval = 3});
  (void)ck::restore_training_state(ck::Reader(path), resumed.parameters(), opt_resumed, 1);
  CHECK(opt_resumed.loss_scale()->scale() == opt_first.loss_scale()->scale());
  CHECK(opt_resumed.loss_scale()->clean_steps() == 2);
  train(resumed, opt_resumed, 5, 9);
  CHECK(loss_scale_values(resumed.parameters()) == loss_scale_values(straight.parameters()));
  CHECK(opt_resumed.loss_scale()->scale() == opt_straight.loss_scale()->scale());
  CHECK(opt_resumed.loss_scale()->clean_steps() == opt_straight.loss_scale()->clean_steps());

  // A run without a loss scale (resuming in bfloat16) leaves it aside; one whose interval the
  // saved count has passed is refused, naming the file, before anything changes.
  strata::optim::Adam plain(resumed.parameters(), 0.01);
  (void)ck::restore_training_state(ck::Reader(path), resumed.parameters(), plain, 1);
  CHECK_FALSE(plain.loss_scale().has_value());
  strata::optim::Adam short_interval(resumed.parameters(), 0.01);
  short_interval.set_loss_scale({.growth_interval = 2});
  CHECK_THROWS_WITH_AS(ck::restore_training_state(ck::Reader(path), resumed.parameters(), short_interval, 1),
                       doctest::Contains("c.strata"), strata::invalid_argument);
  CHECK(short_interval.steps() == 0);
  std::filesystem::remove_all(dir);
}

// Training on cuda:0 against the same training on the CPU: a CNN (convolution, ReLU, max
// pooling, linear layers, dropout) and the softmax cross-entropy, SGD with momentum and Adam,
// in float64 so the two runs agree to rounding. Also: a moved model's parameters, mixed
// devices named in the error, and a steady-state device step that calls cudaMalloc no more.
// The Transformer and ResNet layers (support/layer_ops.hpp) on the device against the CPU: in
// float64 to rounding, and in float32 on fresh random inputs within float32's bounds.
// CentralStorageStrategy over every GPU against OneDeviceStrategy on the CPU.
#include "doctest.hpp"

#include <cmath>

#include "cuda_test_support.hpp"
#include "support/layer_ops.hpp"

using namespace strata;
using namespace cuda_test;

namespace {

/// The model both runs train: the same initial values from the same seed.
nn::Sequential make_model(std::uint64_t seed) {
  Generator gen(seed);
  nn::Sequential m;
  m.add(nn::Conv2d(1, 4, 3, 1, 1, true, gen, DType::f64));
  m.add(nn::ReLU());
  m.add(nn::MaxPool2d(2));
  m.add(nn::Flatten());
  m.add(nn::Linear(4 * 4 * 4, 16, true, gen, DType::f64));
  m.add(nn::ReLU());
  m.add(nn::Dropout(0.25, gen));
  m.add(nn::Linear(16, 5, true, gen, DType::f64));
  return m;
}

struct Data {
  Tensor x, y;
};

Data make_data(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Data d{normal({n, 1, 8, 8}, 0, 1, gen, DType::f64), Tensor::empty({n}, DType::i64)};
  for (std::int64_t i = 0; i < n; ++i) d.y.data<std::int64_t>()[i] = (i * 7) % 5;
  return d;
}

/// Trains `steps` steps of `opt` on (x, y) and returns the losses.
template <class Opt>
std::vector<double> train(nn::Sequential& model, Opt& opt, const Tensor& x, const Tensor& y, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Tensor loss = softmax_cross_entropy(model(x), y, 1.0 / static_cast<double>(x.dim(0)));
    opt.apply_gradients(grad(loss, model.parameters()));
    losses.push_back(loss.item());
  }
  return losses;
}

void check_same_parameters(const nn::Sequential& a, const nn::Sequential& b, double tol) {
  const auto& pa = a.parameters();
  const auto& pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].to_vector<double>(), vb = pb[i].to_vector<double>();
    for (std::size_t j = 0; j < va.size(); ++j) REQUIRE(va[j] == doctest::Approx(vb[j]).epsilon(tol));
  }
}

}  // namespace

TEST_CASE("Module::to moves the parameters in place, and the optimizer's handles follow") {
  auto model = make_model(1);
  const auto before = model.parameters()[0].to_vector<double>();
  model.to(kDev);
  for (const Tensor& p : model.parameters()) CHECK(p.device() == kDev);
  CHECK(model.parameters()[0].to_vector<double>() == before);
  CHECK(model.parameters()[0].requires_grad());
}

TEST_CASE("a CNN trained with SGD + momentum on cuda:0 follows the CPU run step for step") {
  auto cpu = make_model(7), gpu = make_model(7);
  gpu.to(kDev);
  const Data d = make_data(32, 8);
  const Tensor gx = d.x.to(kDev), gy = d.y.to(kDev);
  optim::Sgd cpu_opt(cpu.parameters(), 0.05, {.momentum = 0.9}), gpu_opt(gpu.parameters(), 0.05, {.momentum = 0.9});
  const auto lc = train(cpu, cpu_opt, d.x, d.y, 10);
  const auto lg = train(gpu, gpu_opt, gx, gy, 10);
  for (std::size_t s = 0; s < lc.size(); ++s) {
    CAPTURE(s);
    CHECK(lg[s] == doctest::Approx(lc[s]).epsilon(1e-9));
  }
  CHECK(lc.back() < lc.front());  // it learned something
  check_same_parameters(cpu, gpu, 1e-8);
}

TEST_CASE("Adam on cuda:0 follows the CPU run") {
  auto cpu = make_model(11), gpu = make_model(11);
  gpu.to(kDev);
  const Data d = make_data(16, 12);
  optim::Adam cpu_opt(cpu.parameters(), 1e-2), gpu_opt(gpu.parameters(), 1e-2);
  const auto lc = train(cpu, cpu_opt, d.x, d.y, 5);
  const auto lg = train(gpu, gpu_opt, d.x.to(kDev), d.y.to(kDev), 5);
  for (std::size_t s = 0; s < lc.size(); ++s) CHECK(lg[s] == doctest::Approx(lc[s]).epsilon(1e-9));
  check_same_parameters(cpu, gpu, 1e-8);
}

TEST_CASE("batched matmul on the device (one strided-batched cuBLAS call where the batch allows): values and "
          "gradients equal the CPU's") {
  // Contiguous batches, a transposed view, a 2-D operand shared by every entry, and permuted
  // batch axes (entry by entry); float64, and a column sum over many rows (sum_columns).
  Generator gen(21);
  const Tensor a = normal({2, 3, 4, 5}, 0, 1, gen, DType::f64), b = normal({2, 3, 5, 6}, 0, 1, gen, DType::f64),
               bt = normal({2, 3, 6, 5}, 0, 1, gen, DType::f64), w = normal({5, 6}, 0, 1, gen, DType::f64),
               p = normal({3, 2, 4, 5}, 0, 1, gen, DType::f64);
  auto run = [](std::vector<Tensor> in, auto&& f) {
    for (Tensor& t : in) t = t.detach().requires_grad_(true);
    const Tensor out = f(in);
    Generator rg(22);
    const Tensor r = normal(out.shape(), 0, 1, rg, DType::f64).to(out.device());
    std::vector<double> got = out.to_vector<double>();
    auto g = grad(sum(out * r), in);
    for (std::size_t i = 0; i < g.size(); ++i)
      for (double v : g[i].to_vector<double>()) got.push_back(v);
    return got;
  };
  auto both = [&](std::vector<Tensor> in, auto&& f) {
    std::vector<Tensor> on;
    for (const Tensor& t : in) on.push_back(t.to(kDev));
    const auto want = run(in, f), got = run(on, f);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  };
  both({a, b}, [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); });
  both({a, bt}, [](const std::vector<Tensor>& t) { return matmul(t[0], transpose(t[1], -1, -2)); });
  both({a, w}, [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); });
  both({p, b}, [](const std::vector<Tensor>& t) { return matmul(permute(t[0], {1, 0, 2, 3}), t[1]); });
  const Tensor x = normal({3000, 70}, 0, 1, gen, DType::f64), wl = normal({5, 70}, 0, 1, gen, DType::f64),
               bl = normal({5}, 0, 1, gen, DType::f64);
  both({x, wl, bl}, [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); });  // the bias: column sums
}

TEST_CASE("elementwise ops, sum and mean on the device: values and gradients equal the CPU's") {
  Generator gen(20);
  Tensor a = normal({6, 7}, 0, 1, gen, DType::f64), b = uniform({6, 7}, 0.5, 2, gen, DType::f64);
  auto run = [](Tensor x, Tensor y) {
    x = x.detach().requires_grad_(true);
    y = y.detach().requires_grad_(true);
    Tensor out = mean(tanh(x) * y + exp(x) / y - sigmoid(y) * 3.0);
    const std::vector<Tensor> wrt{x, y};  // Gradients views this list
    auto g = grad(out, wrt);
    return std::tuple{out.item(), g[0].to_vector<double>(), g[1].to_vector<double>()};
  };
  const auto [vc, gac, gbc] = run(a, b);
  const auto [vg, gag, gbg] = run(a.to(kDev), b.to(kDev));
  CHECK(vg == doctest::Approx(vc).epsilon(1e-12));
  for (std::size_t i = 0; i < gac.size(); ++i) {
    REQUIRE(gag[i] == doctest::Approx(gac[i]).epsilon(1e-12));
    REQUIRE(gbg[i] == doctest::Approx(gbc[i]).epsilon(1e-12));
  }
}

namespace {

/// ||got - want|| / ||want|| over a vector (NaN fails).
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

void check_layers(DType dtype, std::uint64_t seed, double bound) {
  namespace lo = support::layer_ops;
  for (const auto size : {lo::Size::small, lo::Size::large}) {
    CAPTURE(static_cast<int>(size));
    CAPTURE(seed);
    const lo::Inputs in = lo::inputs(seed, size, dtype);
    const lo::Result c = lo::run(in, Device::cpu()), g = lo::run(in, kDev);
    CHECK(std::abs(g.value - c.value) <= bound * std::abs(c.value));
    REQUIRE(g.grads.size() == c.grads.size());
    for (std::size_t i = 0; i < c.grads.size(); ++i) {
      CAPTURE(i);
      const double e = relative_error(g.grads[i], c.grads[i]);
      CHECK(e <= bound);  // (false for NaN)
      MESSAGE("gradient " << i << ": relative error " << e);
    }
    CHECK(relative_error(g.running_mean, c.running_mean) <= bound);
    CHECK(relative_error(g.running_var, c.running_var) <= bound);
  }
}

}  // namespace

TEST_CASE("the Transformer and ResNet layers on the device: values and gradients equal the CPU's") {
  check_layers(DType::f64, 31, 1e-11);
  // float32, fresh inputs each run: METHOD's float32 bound is far under 1e-3.
  const auto seed = static_cast<std::uint64_t>(std::random_device{}());
  check_layers(DType::f32, seed, 1e-4);
}

TEST_CASE("operands on different devices are an error naming both") {
  Tensor a = ones({3}), b = ones({3}).to(kDev);
  CHECK_THROWS_WITH_AS(b + a, doctest::Contains("operands on different devices (cuda:0 and cpu)"), invalid_argument);
}

TEST_CASE("a steady-state training step on the device calls cudaMalloc no more") {
  auto model = make_model(3);
  model.to(kDev);
  const Data d = make_data(32, 4);
  const Tensor x = d.x.to(kDev), y = d.y.to(kDev);
  optim::Sgd opt(model.parameters(), 0.01, {.momentum = 0.9});
  (void)train(model, opt, x, y, 3);
  auto& alloc = kernels::cuda::CachingDeviceAllocator::of(0);
  const auto before = alloc.stats();
  (void)train(model, opt, x, y, 10);
  CHECK(alloc.stats().system_allocations == before.system_allocations);
}

TEST_CASE("OneDeviceStrategy on cuda:0 moves the model and each batch there, and matches OneDeviceStrategy on the CPU") {
  auto run = [](Device device) {
    OneDeviceStrategy strategy(device);
    auto model = strategy.scope([] { return make_model(21); });
    for (const Tensor& p : model.parameters()) CHECK(p.device() == device);
    optim::Sgd opt(model.parameters(), 0.05, {.momentum = 0.9});
    const Data d = make_data(24, 22);
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      data::Batch b;
      b.x = d.x;  // on the host: the strategy moves it
      b.y = d.y;
      b.size = b.global_size = 24;
      losses.push_back(strategy.reduce(ReduceOp::Sum, strategy.run(
          [&](ReplicaContext& ctx, const data::Batch& on) {
            CHECK(on.x.device() == device);
            Tensor loss = softmax_cross_entropy(model(on.x), on.y, 1.0 / 24);
            opt.apply_gradients(ctx, grad(loss, model.parameters()));
            return loss.item();
          },
          b)));
    }
    return losses;
  };
  const auto lc = run(Device::cpu());
  const auto lg = run(kDev);
  for (std::size_t s = 0; s < lc.size(); ++s) CHECK(lg[s] == doctest::Approx(lc[s]).epsilon(1e-9));
}

TEST_CASE("CentralStorageStrategy over every GPU follows OneDeviceStrategy on the CPU, its state on the host") {
  // The variables, Adam's state and SyncBatchNorm's running statistics on the host; each
  // replica computes on its GPU's copy; global batches of 15 (uneven over two or more GPUs),
  // global-norm clipping, float64 so the runs agree to rounding.
  const int gpus = kernels::cuda::device_count();
  auto make = [] {
    Generator gen(5);
    nn::Sequential m;
    m.add(nn::Linear(20, 32, true, gen, DType::f64));
    m.add(nn::SyncBatchNorm(32, 1e-5, 0.1, true, DType::f64));
    m.add(nn::ReLU());
    m.add(nn::Linear(32, 4, true, gen, DType::f64));
    return m;
  };
  Generator gen(6);
  const Tensor x = normal({45, 20}, 0, 1, gen, DType::f64);
  Tensor y = Tensor::empty({45}, DType::i64);
  for (int i = 0; i < 45; ++i) y.data<std::int64_t>()[i] = (i * 7) % 4;
  auto train = [&](auto& strategy, std::vector<std::vector<double>>& state) {
    auto model = strategy.scope(make);
    auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.01); });
    opt.clip_by_global_norm(0.5);
    std::vector<double> losses;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& batch : strategy.distribute(data::Pipeline(data::TensorDataset(x, y)).batch(15))) {
        auto per = strategy.run(
            [&](ReplicaContext& ctx, const data::Batch& b) {
              Tensor t = full({1}, 1.0, DType::f64).to(b.x.device());  // a user's sum of a device value
              ctx.all_reduce(ReduceOp::Sum, t);
              CHECK(t.item() == ctx.num_replicas_in_sync());
              Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
              opt.apply_gradients(ctx, grad(loss, model.parameters()));
              return loss;
            },
            batch);
        losses.push_back(strategy.reduce(ReduceOp::Sum, per).item());
      }
    const nn::Module& held = model;
    for (const Tensor& p : model.parameters()) state.push_back(p.to(Device::cpu()).template to_vector<double>());
    for (const Tensor& b : held.buffers()) {
      CHECK(b.device() == Device::cpu());
      state.push_back(b.template to_vector<double>());
    }
    return losses;
  };
  OneDeviceStrategy cpu;
  std::vector<std::vector<double>> want_state, got_state;
  const auto want = train(cpu, want_state);
  std::vector<Device> devices;
  for (int i = 0; i < gpus; ++i) devices.push_back(Device::cuda(i));
  CentralStorageStrategy<> gpu(devices);
  const auto got = train(gpu, got_state);
  REQUIRE(got.size() == want.size());
  for (std::size_t s = 0; s < want.size(); ++s) CHECK(got[s] == doctest::Approx(want[s]).epsilon(1e-9));
  REQUIRE(got_state.size() == want_state.size());
  for (std::size_t k = 0; k < want_state.size(); ++k)
    for (std::size_t i = 0; i < want_state[k].size(); ++i)
      REQUIRE(got_state[k][i] == doctest::Approx(want_state[k][i]).epsilon(1e-9));
}

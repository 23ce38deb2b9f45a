// The ops' device paths on a CPU-only machine: cuda:0 is support/host_device.hpp's stand-in,
// whose memory host code must not read (data<T>() of it throws, as on a GPU). Forward and
// backward of each op that has a device path, and training steps, against the same work on
// the CPU. A backward function without a device path (reshape's, once) fails here, not first
// on a lent GPU.
#include "doctest.hpp"

#include <strata/strata.hpp>

#include "support/host_device.hpp"
#include "support/train_step.hpp"

using namespace strata;

namespace {

const Device kDev = Device::cuda(0);
const bool installed = (support::host_device::install(), true);

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(tol));
}

/// A small network that sends gradients through every shape op with a device path:
/// linear, relu, reshape to NCHW, max pooling, flatten, linear, softmax cross-entropy.
struct Net {
  Tensor w1, b1, w2, b2;
  explicit Net(std::uint64_t seed) {
    Generator g(seed);
    w1 = normal({64, 12}, 0, 0.3, g, DType::f64).requires_grad_(true);
    b1 = normal({64}, 0, 0.1, g, DType::f64).requires_grad_(true);
    w2 = normal({5, 16}, 0, 0.3, g, DType::f64).requires_grad_(true);
    b2 = normal({5}, 0, 0.1, g, DType::f64).requires_grad_(true);
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const std::int64_t n = x.dim(0);
    Tensor h = linear(x, w1, b1, Activation::relu);                  // [n, 64]
    Tensor img = reshape(h, {n, 4, 4, 4});                           // reshape's backward
    Tensor pooled = max_pool2d(img, 2);                              // [n, 4, 2, 2]
    Tensor logits = linear(flatten(pooled), w2, b2);                 // flatten's backward
    return softmax_cross_entropy(logits, y, 1.0 / static_cast<double>(n));
  }
};

struct Batch {
  Tensor x, y;
};

Batch make_batch(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  Batch b{normal({n, 12}, 0, 1, g, DType::f64), Tensor::empty({n}, DType::i64)};
  for (std::int64_t i = 0; i < n; ++i) b.y.data<std::int64_t>()[i] = (i * 3) % 5;
  return b;
}

template <class Opt>
std::vector<double> train(Net& net, Opt& opt, const Batch& b, int steps) {
  std::vector<double> losses;
  const auto params = net.params();
  for (int s = 0; s < steps; ++s) {
    Tensor loss = net.loss(b.x, b.y);
    opt.apply_gradients(grad(loss, params));
    losses.push_back(loss.item());
  }
  return losses;
}

void move_to(Net& net, Device d) {
  net.w1 = net.w1.to(d).detach().requires_grad_(true);
  net.b1 = net.b1.to(d).detach().requires_grad_(true);
  net.w2 = net.w2.to(d).detach().requires_grad_(true);
  net.b2 = net.b2.to(d).detach().requires_grad_(true);
}

}  // namespace

TEST_CASE("Tensor.DevicePaths: the stand-in device's memory is not for host code") {
  REQUIRE(installed);
  Tensor t = ones({3}).to(kDev);
  CHECK(t.device() == kDev);
  CHECK_THROWS_WITH_AS(t.data<float>(), doctest::Contains("host code cannot read device memory"), invalid_argument);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("Tensor.DevicePaths: elementwise ops, sum and mean: values and gradients equal the CPU's") {
  Generator gen(20);
  Tensor a = normal({6, 7}, 0, 1, gen, DType::f64), b = uniform({6, 7}, 0.5, 2, gen, DType::f64);
  auto run = [](Tensor x, Tensor y) {
    x = x.detach().requires_grad_(true);
    y = y.detach().requires_grad_(true);
    Tensor out = mean(tanh(x) * y + exp(x) / y - sigmoid(y) * 3.0 + relu(x - 0.1) * log(y) - neg(x) + pow(y, 2.0));
    const std::vector<Tensor> wrt{x, y};
    auto g = grad(out, wrt);
    return std::tuple{out.item(), g[0].to_vector<double>(), g[1].to_vector<double>()};
  };
  const auto [vc, gac, gbc] = run(a, b);
  const auto [vg, gag, gbg] = run(a.to(kDev), b.to(kDev));
  CHECK(vg == doctest::Approx(vc).epsilon(1e-12));
  check_close(gag, gac, 1e-12);
  check_close(gbg, gbc, 1e-12);
}

TEST_CASE("Tensor.DevicePaths: linear, reshape, max pooling, flatten and cross-entropy train as on the CPU") {
  for (const char* opt_name : {"sgd", "adam"}) {
    CAPTURE(opt_name);
    Net cpu(7), dev(7);
    move_to(dev, kDev);
    const Batch b = make_batch(10, 3);
    const Batch bd{b.x.to(kDev), b.y.to(kDev)};
    std::vector<double> lc, ld;
    if (std::string(opt_name) == "sgd") {
      optim::Sgd oc(cpu.params(), 0.1, {.momentum = 0.9}), od(dev.params(), 0.1, {.momentum = 0.9});
      lc = train(cpu, oc, b, 4);
      ld = train(dev, od, bd, 4);
    } else {
      optim::Adam oc(cpu.params(), 1e-2), od(dev.params(), 1e-2);
      lc = train(cpu, oc, b, 4);
      ld = train(dev, od, bd, 4);
    }
    check_close(ld, lc, 1e-12);
    CHECK(lc.back() < lc.front());
    const auto pc = cpu.params(), pd = dev.params();
    for (std::size_t i = 0; i < pc.size(); ++i) check_close(pd[i].to_vector<double>(), pc[i].to_vector<double>(), 1e-11);
  }
}

TEST_CASE("Tensor.DevicePaths: a Sequential model under OneDeviceStrategy(cuda:0) steps as on the CPU") {
  auto run = [](Device device) {
    OneDeviceStrategy s(device);
    auto model = s.scope([] {
      Generator g(5);
      nn::Sequential m;
      m.add(nn::Flatten());
      m.add(nn::Linear(12, 16, true, g));
      m.add(nn::ReLU());
      m.add(nn::Linear(16, 4, true, g));
      return m;
    });
    optim::Sgd opt(model.parameters(), 0.05, 0.9);
    Generator g(9);
    Tensor x = normal({30, 1, 3, 4}, 0, 1, g);
    Tensor y = Tensor::empty({30}, DType::i64);
    for (std::int64_t i = 0; i < 30; ++i) y.data<std::int64_t>()[i] = i % 4;
    std::vector<double> losses;
    for (const auto& b : s.distribute(data::Pipeline(data::TensorDataset(x, y)).batch(7)))
      losses.push_back(support::train_step(s, model, opt, b));
    return losses;
  };
  const auto lc = run(Device::cpu()), ld = run(kDev);
  REQUIRE(lc.size() == 5);
  check_close(ld, lc, 1e-5);  // float32, the same kernels' arithmetic up to summation order
}

// The ops' device paths on a CPU-only machine: cuda:0 is support/host_device.hpp's stand-in,
// whose memory host code must not read (data<T>() of it throws, as on a GPU). Forward and
// backward of each op that has a device path, and training steps, against the same work on
// the CPU. A backward function without a device path (reshape's, once) fails here, not first
// on a lent GPU.
#include "doctest.hpp"

#include <strata/strata.hpp>

#include <strata/models/char_transformer.hpp>

#include "support/host_device.hpp"
#include "support/layer_ops.hpp"
#include "support/train_step.hpp"

using namespace strata;

namespace {

const Device kDev = Device::cuda(0);

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
  REQUIRE(support::host_device::installed);
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

TEST_CASE("Tensor.DevicePaths: batched matmul, in one batched GEMM where the batch axes allow it, equals the CPU's") {
  // Contiguous batches (one batched GEMM each way), a transposed view, a 2-D operand every
  // batch entry shares (its gradient summed over the batch: entry by entry), and batch axes
  // permuted so that no one stride walks them (copied contiguous, then one batched GEMM).
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
    check_close(run(on, f), run(in, f), 1e-12);
  };
  both({a, b}, [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); });
  both({a, bt}, [](const std::vector<Tensor>& t) { return matmul(t[0], transpose(t[1], -1, -2)); });
  both({a, w}, [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); });
  both({p, b}, [](const std::vector<Tensor>& t) { return matmul(permute(t[0], {1, 0, 2, 3}), t[1]); });
}

TEST_CASE("Tensor.DevicePaths: attention over the heads of one projection is one batched GEMM a product, each way") {
  // q, k and v as MultiheadAttention's device path sees them: strided views of the thirds of a
  // [B, T, 3 H D] projection seen as [B, 3 H, T, D], whose batch axes (B, H) no one stride walks. Each of
  // the two products forward and the four gradients is one batched call, not one per (b, h).
  const std::int64_t B = 3, T = 5, H = 2, D = 4;
  Generator gen(23);
  const Tensor qkv = normal({B, T, 3 * H * D}, 0, 1, gen, DType::f64);
  auto run = [&](Tensor x, std::int64_t* forward_calls, std::int64_t* backward_calls) {
    x = x.detach().requires_grad_(true);
    namespace hd = support::host_device;
    const std::int64_t g0 = hd::gemm_calls, b0 = hd::gemm_batched_calls;
    const Tensor all = permute(reshape(x, {B, T, 3 * H, D}), {0, 2, 1, 3});
    const auto third = [&](std::int64_t k) { return ops::detail::slice_node(all, 1, k * H, (k + 1) * H, false); };
    const Tensor o = scaled_dot_product_attention(third(0), third(1), third(2), true);
    const std::int64_t g1 = hd::gemm_calls, b1 = hd::gemm_batched_calls;
    Generator rg(24);
    const Tensor r = normal(o.shape(), 0, 1, rg, DType::f64).to(o.device());
    const std::vector<Tensor> wrt{x};
    std::vector<double> got = o.to_vector<double>();
    for (double v : grad(sum(o * r), wrt)[0].to_vector<double>()) got.push_back(v);
    if (forward_calls) {
      forward_calls[0] = g1 - g0;
      forward_calls[1] = b1 - b0;
      backward_calls[0] = hd::gemm_calls - g1;
      backward_calls[1] = hd::gemm_batched_calls - b1;
    }
    return got;
  };
  std::int64_t fwd[2] = {-1, -1}, bwd[2] = {-1, -1};
  const auto on_device = run(qkv.to(kDev), fwd, bwd);
  check_close(on_device, run(qkv, nullptr, nullptr), 1e-12);
  CHECK(fwd[0] == 0);  // GEMMs one batch entry at a time
  CHECK(fwd[1] == 2);  // q kᵀ and p v
  CHECK(bwd[0] == 0);
  CHECK(bwd[1] == 4);  // dq, dk, dp, dv
}

TEST_CASE("Tensor.DevicePaths: the global norm of device gradients is read from the device once, and clips as on the CPU") {
  Generator gen(25);
  std::vector<Tensor> start;
  for (std::int64_t n : {7, 1, 12, 5, 30}) start.push_back(normal({n}, 0, 1, gen, DType::f64));
  auto clip = [&](Device d, std::int64_t* reads) {
    std::vector<Tensor> params;
    for (const Tensor& t : start) params.push_back(t.to(d).detach().requires_grad_(true));
    Tensor loss = sum(mul(mul(params[0], params[0]), params[0]));
    for (std::size_t i = 1; i < params.size(); ++i) loss = add(loss, sum(mul(mul(params[i], params[i]), params[i])));
    const Gradients g = grad(loss, params);
    const std::int64_t before = support::host_device::to_host_copies;
    const double norm = optim::GradientTransforms::global_norm(g);
    if (reads) *reads = support::host_device::to_host_copies - before;
    optim::GradientTransforms transforms;
    transforms.max_global_norm = 1.0;
    transforms.apply(g);
    std::vector<double> got{norm};
    for (std::size_t i = 0; i < g.size(); ++i)
      for (double v : g[i].to_vector<double>()) got.push_back(v);
    return got;
  };
  std::int64_t reads = -1;
  const auto on_device = clip(kDev, &reads);
  const auto on_cpu = clip(Device::cpu(), nullptr);
  REQUIRE(on_cpu[0] > 1.0);  // the clipping applies
  check_close(on_device, on_cpu, 1e-12);
  CHECK(reads == 1);  // not one read per gradient
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

TEST_CASE("Tensor.DevicePaths: the Transformer and ResNet layers: values and gradients equal the CPU's") {
  namespace lo = support::layer_ops;
  for (const auto size : {lo::Size::small, lo::Size::large}) {
    CAPTURE(static_cast<int>(size));
    const lo::Inputs in = lo::inputs(31, size, DType::f64);
    const lo::Result c = lo::run(in, Device::cpu()), d = lo::run(in, kDev);
    CHECK(d.value == doctest::Approx(c.value).epsilon(1e-12));
    REQUIRE(d.grads.size() == c.grads.size());
    for (std::size_t i = 0; i < c.grads.size(); ++i) {
      CAPTURE(i);
      double norm = 0;
      for (double v : c.grads[i]) norm += v * v;
      CHECK(norm > 0);  // every input reaches the loss
      check_close(d.grads[i], c.grads[i], 1e-12);
    }
    check_close(d.running_mean, c.running_mean, 1e-12);
    check_close(d.running_var, c.running_var, 1e-12);
    CHECK(c.running_mean != std::vector<double>(c.running_mean.size(), 0.0));
  }
}

TEST_CASE("Tensor.DevicePaths: embedding on a device checks its indices and refuses row-sparse gradients") {
  Tensor table = ones({4, 2}).to(kDev);
  Tensor bad = Tensor::empty({2}, DType::i64);
  bad.data<std::int64_t>()[0] = 1;
  bad.data<std::int64_t>()[1] = 4;
  CHECK_THROWS_WITH_AS(embedding(table, bad.to(kDev)), doctest::Contains("index 4 at position 1 is out of range"),
                       invalid_argument);
  Tensor ok = zeros({2}, DType::i64);
  CHECK_THROWS_WITH_AS(embedding(table, ok, TableGradient::row_sparse), doctest::Contains("row-sparse"),
                       invalid_argument);
  CHECK(embedding(table, ok).to_vector<float>() == std::vector<float>(4, 1.0f));  // host indices are fine
}

TEST_CASE("Tensor.DevicePaths: a Transformer and a batch-normalised model under OneDeviceStrategy(cuda:0) train as "
          "on the CPU") {
  // The Transformer: embeddings, a position table broadcast over the batch, layer norms,
  // causal attention, GELU, the per-token loss of the trainer (Reduction::none, then the
  // global average) and AdamW.
  auto transformer = [](Device device) {
    OneDeviceStrategy s(device);
    const models::TransformerShape shape{11, 8, 16, 2, 2};
    auto model = s.scope([&] {
      Generator g(3);
      return models::CharTransformer(shape, g);
    });
    optim::AdamW opt(model.parameters(), 1e-2);
    Generator g(4);
    Tensor x = Tensor::empty({10, 8}, DType::i64), y = Tensor::empty({10, 8}, DType::i64);
    for (std::int64_t i = 0; i < 80; ++i) {
      x.data<std::int64_t>()[i] = (i * 5 + 1) % 11;
      y.data<std::int64_t>()[i] = (i * 3 + 2) % 11;
    }
    std::vector<double> losses;
    for (const auto& batch : s.distribute(data::Pipeline(data::TensorDataset(x, y)).batch(4))) {
      auto l = s.run(
          [&](ReplicaContext& ctx, const data::Batch& b) {
            const Tensor logits = reshape(model(b.x), {-1, shape.vocab});
            const Tensor per = nn::cross_entropy(logits, reshape(b.y, {-1}), nn::Reduction::none);
            Tensor loss = compute_average_loss(per, b.global_size * 8);
            opt.apply_gradients(ctx, grad(loss, model.parameters()));
            return loss;
          },
          batch);
      losses.push_back(s.reduce(ReduceOp::Sum, l).item());
    }
    return losses;
  };
  const auto tc = transformer(Device::cpu()), td = transformer(kDev);
  REQUIRE(tc.size() == 3);
  check_close(td, tc, 1e-5);  // float32, the same kernels' arithmetic up to summation order
  // Batch norm's buffers move with the model: training and evaluation on the device.
  auto normalised = [](Device device) {
    OneDeviceStrategy s(device);
    auto model = s.scope([] {
      Generator g(6);
      nn::Sequential m;
      m.add(nn::Linear(12, 16, true, g));
      m.add(nn::BatchNorm1d(16));
      m.add(nn::ReLU());
      m.add(nn::Linear(16, 4, true, g));
      return m;
    });
    optim::Sgd opt(model.parameters(), 0.05, 0.9);
    Generator g(9);
    Tensor x = normal({30, 12}, 0, 1, g);
    Tensor y = Tensor::empty({30}, DType::i64);
    for (std::int64_t i = 0; i < 30; ++i) y.data<std::int64_t>()[i] = i % 4;
    std::vector<double> out;
    for (const auto& b : s.distribute(data::Pipeline(data::TensorDataset(x, y)).batch(7)))
      out.push_back(support::train_step(s, model, opt, b));
    model.eval();
    for (double v : model(x.to(device)).to(Device::cpu()).to_vector<float>()) out.push_back(v);
    for (const Tensor& t : model.buffers()) out.push_back(to_dtype(t.to(Device::cpu()), DType::f64).to_vector<double>()[0]);
    return out;
  };
  const auto nc = normalised(Device::cpu()), nd = normalised(kDev);
  REQUIRE(nc.size() == 5 + 120 + 3);
  CHECK(nc.back() == 5.0);  // num_batches_tracked, counted on the device too
  check_close(nd, nc, 1e-5);
}

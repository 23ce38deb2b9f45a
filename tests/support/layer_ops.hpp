// Every op of the Transformer and ResNet layers in one scalar loss, for comparing a device's
// paths with the CPU's: layer norm, embedding (with repeated indices), causal attention
// (batched matmul, the scaled masked softmax), softmax along an inner axis, log-softmax, concat
// and slice, sums over trailing and leading axes, broadcast operands, GELU, average pooling with stride and padding, the global average, batch norm in
// training mode (the batch's statistics, the ReLU and the shortcut fused) and in evaluation
// mode. run() gives the loss, every input's gradient and the running statistics.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/strata.hpp>

namespace support::layer_ops {

using namespace strata;

/// small: a few of everything; large: rows wider than a warp, more rows than a block, planes
/// larger than a block of threads (the device kernels' loops go round).
enum class Size { small, large };

struct Inputs {
  Tensor x, ln_w, ln_b, table, q, k, v, img, bn_w, bn_b, shortcut, idx;
};

inline Inputs inputs(std::uint64_t seed, Size size, DType dtype) {
  const bool big = size == Size::large;
  const std::int64_t B = big ? 4 : 3, T = big ? 24 : 4, D = big ? 80 : 6, V = big ? 50 : 9;
  const std::int64_t H = big ? 4 : 3, Tq = big ? 40 : 5, Dh = big ? 16 : 4;
  const std::int64_t C = big ? 6 : 4, S = big ? 19 : 5;
  Generator g(seed);
  Inputs in;
  in.x = normal({B, T, D}, 0.5, 2, g, dtype);
  in.ln_w = normal({D}, 1, 0.2, g, dtype);
  in.ln_b = normal({D}, 0, 0.2, g, dtype);
  in.table = normal({V, D}, 0, 1, g, dtype);
  in.q = normal({2, H, Tq, Dh}, 0, 1, g, dtype);
  in.k = normal({2, H, Tq, Dh}, 0, 1, g, dtype);
  in.v = normal({2, H, Tq, Dh}, 0, 1, g, dtype);
  in.img = normal({3, C, S, S}, 1, 2, g, dtype);
  in.bn_w = normal({C}, 1, 0.2, g, dtype);
  in.bn_b = normal({C}, 0, 0.2, g, dtype);
  in.shortcut = normal({3, C, S, S}, 0, 1, g, dtype);
  in.idx = Tensor::empty({B, T}, DType::i64);
  std::int64_t* ip = in.idx.data<std::int64_t>();
  for (std::int64_t i = 0; i < B * T; ++i) ip[i] = (i * 7 + 3) % (big ? V : 4) * (big ? 1 : 2);  // repeats
  return in;
}

struct Result {
  double value = 0;
  std::vector<std::vector<double>> grads;
  std::vector<double> running_mean, running_var;
};

inline std::vector<double> as_doubles(const Tensor& t) {
  return to_dtype(t.to(Device::cpu()), DType::f64).to_vector<double>();
}

inline Result run(const Inputs& host, Device d) {
  std::vector<Tensor> p;
  for (const Tensor& t : std::vector<Tensor>{host.x, host.ln_w, host.ln_b, host.table, host.q, host.k, host.v,
                                             host.img, host.bn_w, host.bn_b, host.shortcut})
    p.push_back(t.to(d).detach().requires_grad_(true));
  const DType dt = host.x.dtype();
  const std::int64_t C = host.bn_w.dim(0), D = host.x.dim(2);
  const Tensor idx = host.idx.to(d);
  Tensor rm = zeros({C}, dt).to(d), rv = ones({C}, dt).to(d);
  Tensor h = layer_norm(p[0] + embedding(p[3], idx), p[1], p[2]);
  Tensor att = scaled_dot_product_attention(p[4], p[5], p[6], true);
  Tensor inner = softmax(p[4], 2);  // along the queries
  Tensor joined = concat({slice(h, 2, 1, D - 1), slice(h, 2, 0, 2)}, 2);
  Tensor logp = log_softmax(reshape(joined, {-1, D}));
  Tensor bn = batch_norm(p[7], p[8], p[9], rm, rv, true, 0.1, 1e-5, BatchStatistics::per_replica, Activation::relu,
                         p[10]);
  Tensor head = global_avg_pool2d(avg_pool2d(bn, 3, 2, 1));
  Tensor eval = batch_norm(p[7], p[8], p[9], rm, rv, false);
  Tensor rows = sum(logp * logp, {1}), cols = mean(h, {0, 1});  // trailing and leading axes
  // Broadcast operands: [D] over the leading axes (a bias, a position table), [B, T, 1] over
  // the trailing one; their gradients are sums over those axes.
  Tensor row_scale = reshape(sum(p[0], {2}), {p[0].dim(0), p[0].dim(1), 1});
  Tensor broadcast = sum((h * p[1] - p[2]) / (row_scale * row_scale + 1.0));
  Tensor loss = mean(att * att) + sum(inner * p[6]) + mean(rows * rows) + sum(head * head) + mean(tanh(eval)) +
                sum(cols * cols) + sum(gelu(h) * 0.1) + broadcast * 0.01;
  Result r;
  r.value = loss.item();
  const auto grads = grad(loss, p);
  for (std::size_t i = 0; i < p.size(); ++i) r.grads.push_back(as_doubles(grads[i]));
  r.running_mean = as_doubles(rm);
  r.running_var = as_doubles(rv);
  return r;
}

}  // namespace support::layer_ops

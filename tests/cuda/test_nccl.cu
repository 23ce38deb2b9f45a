// collective::Nccl on one GPU: a group of one rank (bootstrapped by InProcess) runs every
// collective on device memory, the asynchronous form ordered on a stream, the fingerprint
// check, and abort; MultiWorkerMirroredStrategy<Nccl> and MirroredStrategy<Nccl> (one replica
// per GPU this machine has) train as OneDeviceStrategy on the CPU. Groups of several GPUs are
// in test_nccl_multi_gpu.cpp.
#include "doctest.hpp"

#include <chrono>
#include <thread>

#include <strata/collective/in_process.hpp>
#include <strata/collective/nccl.hpp>

#include "cuda_test_support.hpp"

using namespace strata;
using namespace cuda_test;

// The capabilities Nccl opts into, and those it lacks (collective/capabilities.hpp).
static_assert(Collective<collective::Nccl> && collective::RawCollective<collective::Nccl> &&
              collective::WireCompression<collective::Nccl> && collective::DeviceCollective<collective::Nccl>);
static_assert(!collective::HostSharedMemory<collective::Nccl> && !collective::ThreadGroupCollective<collective::Nccl>);
using collective::InProcess;
using collective::Nccl;

TEST_CASE("a one-rank NCCL group: every collective leaves the data as a serial computation would") {
  auto boot = InProcess::make_group(1);
  Nccl nccl(boot[0], 0);
  CHECK(nccl.rank() == 0);
  CHECK(nccl.size() == 1);
  const auto v = random_vector<float>(1000, 1);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max, ReduceOp::Prod}) {
    Tensor x = upload(v, {1000});
    nccl.allreduce(std::span<float>(x.device_data<float>(), 1000), op);
    CHECK(download<float>(x) == v);
  }
  Tensor x = upload(v, {1000}), y = Tensor::empty({1000}, DType::f32, kDev);
  nccl.allgather(std::span<const float>(x.device_data<float>(), 1000), std::span<float>(y.device_data<float>(), 1000));
  CHECK(download<float>(y) == v);
  nccl.reduce_scatter(std::span<const float>(x.device_data<float>(), 1000), std::span<float>(y.device_data<float>(), 1000),
                      ReduceOp::Sum);
  CHECK(download<float>(y) == v);
  nccl.broadcast(std::span<float>(x.device_data<float>(), 1000), 0);
  CHECK(download<float>(x) == v);
  nccl.barrier();
  CHECK(nccl.sequence() == 9);
}

TEST_CASE("iallreduce runs after the compute stream's work and orders another stream after itself") {
  auto boot = InProcess::make_group(1);
  Nccl nccl(boot[0], 0);
  Tensor x = Tensor::empty({1 << 20}, DType::f32, kDev);
  x.fill_(3);  // queued on the compute stream; the all-reduce must see it
  auto w = nccl.iallreduce(std::span<float>(x.device_data<float>(), 1 << 20), ReduceOp::Sum);
  w.then(kernels::cuda::compute_stream(0));
  w.wait();
  CHECK(w.test());
  for (float f : download<float>(x)) REQUIRE(f == 3.0f);
}

TEST_CASE("debug fingerprints agree on a well-formed program; an aborted communicator names its reason") {
  auto boot = InProcess::make_group(1);
  collective::Options o;
  o.check_fingerprints = true;
  Nccl nccl(boot[0], 0, o);
  Tensor x = upload(random_vector<double>(10, 2), {10});
  nccl.allreduce(std::span<double>(x.device_data<double>(), 10), ReduceOp::Sum);
  nccl.abort("the test stopped it");
  CHECK_THROWS_WITH_AS(nccl.allreduce(std::span<double>(x.device_data<double>(), 10), ReduceOp::Sum),
                       doctest::Contains("the test stopped it"), collective_error);
}

namespace {

/// Keeps the compute stream of cuda:0 busy for `ms` milliseconds (the device's own clock).
__global__ void busy_for(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}
void occupy_compute_stream(int ms) {
  busy_for<<<1, 1, 0, kernels::cuda::compute_stream(0)>>>(static_cast<unsigned long long>(ms) * 1'000'000ull);
  kernels::cuda::check(cudaGetLastError(), "busy_for");
}

}  // namespace

TEST_CASE("a blocking call held past its deadline fails naming it, and the communicator stays aborted") {
  // The call waits in cudaStreamSynchronize behind 3 s of other work; the watchdog aborts the
  // communicator at the 500 ms deadline, and the call reports the timeout once the stream is
  // free, after the census (one rank: every rank reached it, so no peer is gone).
  auto boot = InProcess::make_group(1);
  collective::Options o;
  o.timeout = std::chrono::milliseconds(500);
  Nccl nccl(boot[0], 0, o);
  Tensor x = upload(random_vector<float>(256, 3), {256});
  nccl.allreduce(std::span<float>(x.device_data<float>(), 256), ReduceOp::Sum);  // well within it
  occupy_compute_stream(3000);
  CHECK_THROWS_WITH_AS(nccl.allreduce(std::span<float>(x.device_data<float>(), 256), ReduceOp::Sum),
                       doctest::Contains("did not complete within 500 ms"), timeout_error);
  CHECK_THROWS_WITH_AS(nccl.allreduce(std::span<float>(x.device_data<float>(), 256), ReduceOp::Sum),
                       doctest::Contains("aborted NCCL communicator"), collective_error);
}

TEST_CASE("collectives ordered on the device: their values, and their deadline without a host thread waiting") {
  auto boot = InProcess::make_group(1);
  collective::Options o;
  o.timeout = std::chrono::milliseconds(400);
  Nccl nccl(boot[0], 0, o);
  const auto v = random_vector<float>(4096, 4);
  Tensor x = upload(v, {4096});
  nccl.start_allreduce_raw(x.device_data<float>(), 4096, DType::f32, ReduceOp::Sum);
  nccl.join_compute();
  nccl.join_compute();  // nothing new to join: a no-op
  CHECK(download<float>(x) == v);  // a one-rank sum, read on the compute stream after the join
  // Started behind 2 s of other work and joined: no thread of this rank waits, the watchdog
  // aborts at the deadline, and the next call names the collective that overran it.
  occupy_compute_stream(2000);
  nccl.start_allreduce_raw(x.device_data<float>(), 4096, DType::f32, ReduceOp::Sum);
  nccl.join_compute();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  CHECK_THROWS_WITH_AS(nccl.start_allreduce_raw(x.device_data<float>(), 4096, DType::f32, ReduceOp::Sum),
                       doctest::Contains("allreduce #1"), timeout_error);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("Nccl on a device that does not exist is an error naming it") {
  auto boot = InProcess::make_group(1);
  CHECK_THROWS_WITH_AS(Nccl(boot[0], kernels::cuda::device_count()), doctest::Contains("does not exist"),
                       invalid_argument);
}

TEST_CASE("MultiWorkerMirroredStrategy<Nccl> trains on the GPU and follows OneDeviceStrategy on the CPU") {
  // One rank: the same loop, the same data, the same initial values; the gradient engine's
  // buckets live on the GPU and Nccl reduces them there (and host-side agreement, like the
  // loss's reduce, goes through the bootstrap).
  auto make = [] {
    Generator gen(5);
    nn::Sequential m;
    m.add(nn::Linear(20, 32, true, gen, DType::f64));
    m.add(nn::ReLU());
    m.add(nn::Linear(32, 4, true, gen, DType::f64));
    return m;
  };
  Generator gen(6);
  const Tensor x = normal({16, 20}, 0, 1, gen, DType::f64);
  Tensor y = Tensor::empty({16}, DType::i64);
  for (int i = 0; i < 16; ++i) y.data<std::int64_t>()[i] = i % 4;
  data::Batch b;
  b.x = x;
  b.y = y;
  b.size = b.global_size = 16;
  auto train = [&](auto& strategy) {
    auto model = strategy.scope(make);
    auto opt = strategy.scope([&] { return optim::Sgd(model.parameters(), 0.1, {.momentum = 0.9}); });
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step)
      losses.push_back(strategy.reduce(
          ReduceOp::Sum, strategy.run(
                             [&](ReplicaContext& ctx, const data::Batch& on) {
                               Tensor loss = softmax_cross_entropy(model(on.x), on.y, 1.0 / 16);
                               opt.apply_gradients(ctx, grad(loss, model.parameters()));
                               return loss.item();
                             },
                             b)));
    return losses;
  };
  OneDeviceStrategy cpu;
  const auto want = train(cpu);
  auto boot = InProcess::make_group(1);
  MultiWorkerMirroredStrategy<Nccl> gpu(MultiWorkerOptions{}, boot[0], 0);
  const auto got = train(gpu);
  for (std::size_t s = 0; s < want.size(); ++s) CHECK(got[s] == doctest::Approx(want[s]).epsilon(1e-9));
}

TEST_CASE("MirroredStrategy<Nccl> puts a replica on each GPU and follows OneDeviceStrategy on the CPU") {
  // Every GPU of this machine (one on a machine with one): the replicas' copies, rows and
  // gradient buckets on their GPUs, NCCL between them, a global batch of 15 (uneven over two
  // or more), and the loss's reduce back on the host.
  const int gpus = kernels::cuda::device_count();
  auto make = [] {
    Generator gen(5);
    nn::Sequential m;
    m.add(nn::Linear(20, 32, true, gen, DType::f64));
    m.add(nn::ReLU());
    m.add(nn::Linear(32, 4, true, gen, DType::f64));
    return m;
  };
  Generator gen(6);
  const Tensor x = normal({45, 20}, 0, 1, gen, DType::f64);
  Tensor y = Tensor::empty({45}, DType::i64);
  for (int i = 0; i < 45; ++i) y.data<std::int64_t>()[i] = (i * 7) % 4;
  auto train = [&](auto& strategy, std::vector<std::vector<double>>& params) {
    auto model = strategy.scope(make);
    auto opt = strategy.scope([&] { return optim::Adam(model.parameters(), 0.01); });
    std::vector<double> losses;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& batch : strategy.distribute(data::Pipeline(data::TensorDataset(x, y)).batch(15))) {
        auto per = strategy.run(
            [&](ReplicaContext& ctx, const data::Batch& b) {
              Tensor loss = nn::cross_entropy(model(b.x), b.y, nn::Reduction::sum_over_global_batch, b.global_size);
              opt.apply_gradients(ctx, grad(loss, model.parameters()));
              return loss;
            },
            batch);
        losses.push_back(strategy.reduce(ReduceOp::Sum, per).item());
      }
    for (const Tensor& p : model.parameters()) params.push_back(p.to(Device::cpu()).template to_vector<double>());
    return losses;
  };
  OneDeviceStrategy cpu;
  std::vector<std::vector<double>> want_params, got_params;
  const auto want = train(cpu, want_params);
  MirroredStrategy<Nccl> gpu;  // every GPU
  REQUIRE(gpu.num_replicas_in_sync() == gpus);
  const auto got = train(gpu, got_params);
  REQUIRE(got.size() == want.size());
  for (std::size_t s = 0; s < want.size(); ++s) CHECK(got[s] == doctest::Approx(want[s]).epsilon(1e-9));
  REQUIRE(got_params.size() == want_params.size());
  for (std::size_t k = 0; k < want_params.size(); ++k)
    for (std::size_t i = 0; i < want_params[k].size(); ++i)
      REQUIRE(got_params[k][i] == doctest::Approx(want_params[k][i]).epsilon(1e-9));
  CHECK_THROWS_WITH_AS(MirroredStrategy<Nccl>(gpus + 1), doctest::Contains("does not exist"), std::exception);
}

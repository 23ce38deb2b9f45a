// Tensors on cuda:0: memory, transfers, views, fill, and the caching allocators, each checked
// against the same operation on the CPU.
#include "doctest.hpp"

#include "cuda_test_support.hpp"

using namespace strata;
using namespace cuda_test;

TEST_CASE("the CUDA backend is registered by including backend.cuh") {
  CHECK(has_cuda_backend());
  CHECK(kernels::cuda::device_count() >= 1);
}

TEST_CASE("host -> device -> host is bitwise, for every dtype") {
  const auto v = random_vector<float>(1003, 1);
  Tensor d = upload(v, {17, 59});
  CHECK(d.device() == kDev);
  CHECK(d.shape() == Shape{17, 59});
  CHECK(download<float>(d) == v);
  const auto w = random_vector<double>(64, 2);
  CHECK(download<double>(upload(w, {64})) == w);
  std::vector<std::int64_t> ids(300);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i * 7919);
  CHECK(download<std::int64_t>(upload(ids, {300})) == ids);
}

TEST_CASE("clone, copy_ and to() between tensors on the device") {
  const auto v = random_vector<float>(4096, 3);
  Tensor a = upload(v, {64, 64});
  Tensor b = a.clone();
  CHECK(b.device() == kDev);
  CHECK(b.raw_data() != a.raw_data());
  CHECK(download<float>(b) == v);
  Tensor c = Tensor::empty({64, 64}, DType::f32, kDev);
  c.copy_(a);
  CHECK(download<float>(c) == v);
  Tensor h = Tensor::empty({64, 64});
  h.copy_(a);  // device -> host through copy_
  CHECK(h.to_vector<float>() == v);
  CHECK(same_tensor(a.to(kDev), a));
}

TEST_CASE("a strided view gathers on the device exactly as on the CPU") {
  const auto v = random_vector<float>(6 * 5 * 4, 4);
  Tensor host = Tensor::empty({6, 5, 4});
  std::copy(v.begin(), v.end(), host.data<float>());
  Tensor dev = host.to(kDev);
  // Axes 0 and 2 swapped, and an offset of one element along the new axis 0.
  const Tensor ht = detail::make_view(host, {3, 5, 6}, {1, 4, 20}, 1);
  const Tensor dt = detail::make_view(dev, {3, 5, 6}, {1, 4, 20}, 1);
  CHECK_FALSE(dt.is_contiguous());
  CHECK(download<float>(dt.contiguous()) == ht.contiguous().to_vector<float>());
  CHECK(dt.to(Device::cpu()).to_vector<float>() == ht.contiguous().to_vector<float>());
}

TEST_CASE("fill_ and item on the device") {
  Tensor t = Tensor::empty({1000}, DType::f32, kDev);
  t.fill_(2.5);
  for (float x : download<float>(t)) REQUIRE(x == 2.5f);
  Tensor one = Tensor::empty({1}, DType::f64, kDev);
  one.fill_(-3.25);
  CHECK(one.item() == -3.25);
  Tensor h16 = Tensor::empty({8}, DType::f16, kDev);
  h16.fill_(1.5);
  Tensor back = h16.to(Device::cpu());
  CHECK(static_cast<float>(back.data<Half>()[7]) == 1.5f);
}

TEST_CASE("host code reading device memory is an error that says what to do") {
  Tensor t = Tensor::empty({4}, DType::f32, kDev);
  CHECK_THROWS_WITH_AS(t.data<float>(), doctest::Contains("host code cannot read device memory"), invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor::empty({4}, DType::f32, Device::cuda(kernels::cuda::device_count())),
                       doctest::Contains("does not exist"), invalid_argument);
}

TEST_CASE("a steady-state loop of device tensors calls cudaMalloc no more") {
  auto& alloc = kernels::cuda::CachingDeviceAllocator::of(0);
  auto step = [] {
    Tensor a = Tensor::empty({256, 256}, DType::f32, kDev);
    Tensor b = Tensor::empty({1000}, DType::f32, kDev);
    a.fill_(1);
    b.fill_(2);
  };
  step();
  const auto before = alloc.stats();
  for (int i = 0; i < 50; ++i) step();
  const auto after = alloc.stats();
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cache_hits >= before.cache_hits + 100);
  CHECK(after.bytes_in_use == before.bytes_in_use);
}

TEST_CASE("pinned staging buffers are reused") {
  auto& pinned = kernels::cuda::CachingPinnedAllocator::instance();
  const auto v = random_vector<float>(1 << 16, 5);
  (void)download<float>(upload(v, {1 << 16}));
  const auto before = pinned.stats();
  for (int i = 0; i < 10; ++i) CHECK(download<float>(upload(v, {1 << 16})) == v);
  CHECK(pinned.stats().system_allocations == before.system_allocations);
}

TEST_CASE("an Event orders a Stream of the caller's after the compute stream") {
  Tensor t = Tensor::empty({1 << 20}, DType::f32, kDev);
  t.fill_(7);  // queued on the compute stream
  kernels::cuda::Stream mine;
  kernels::cuda::Event filled;
  filled.record(stream());
  filled.block(mine.get());  // the copy below runs after the fill, though on another stream
  std::vector<float> host(1 << 20, 0.0f);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), t.device_data<float>(), host.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, mine.get()));
  mine.synchronize();
  CHECK(mine.done());
  CHECK(filled.done());
  for (float x : host) REQUIRE(x == 7.0f);
}

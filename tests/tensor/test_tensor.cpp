#include "doctest.hpp"

#include <strata/strata.hpp>

using strata::DType;
using strata::Shape;
using strata::Tensor;

TEST_CASE("Tensor.Shape.BroadcastAndStrides") {
  CHECK(strata::broadcast_shapes({4, 1, 3}, {5, 1}) == Shape{4, 5, 3});
  CHECK(strata::broadcast_shapes({}, {2, 3}) == Shape{2, 3});
  CHECK(strata::contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  CHECK_THROWS_AS(strata::broadcast_shapes({2, 3}, {4}), strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::broadcast_shapes({2, 3}, {4}), doctest::Contains("[2, 3] and [4] do not broadcast"),
                       strata::invalid_argument);
  CHECK_THROWS_AS(Shape({1, 2, 3, 4, 5, 6, 7}), strata::invalid_argument);
  CHECK(Shape{2, 3}.dim(-1) == 3);
  const Shape s23{2, 3};
  CHECK_THROWS_AS((void)s23.dim(2), strata::invalid_argument);
}

TEST_CASE("Tensor.Basics.FactoriesViewsAndCopies") {
  Tensor a = strata::from_vector<double>({2, 3}, {1, 2, 3, 4, 5, 6}, DType::f32);
  CHECK(a.dtype() == DType::f32);
  CHECK(a.numel() == 6);
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor v = strata::reshape(a, {3, -1});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(v.raw_data() == a.raw_data());  // a view shares storage
  Tensor c = a.clone();
  c.fill_(7);
  CHECK(a.to_vector<double>()[0] == 1);
  CHECK(c.to_vector<double>() == std::vector<double>(6, 7.0));
  a.copy_(c);
  CHECK(v.to_vector<double>() == std::vector<double>(6, 7.0));
  CHECK_THROWS_AS(a.copy_(strata::zeros({3, 2})), strata::invalid_argument);
  CHECK_THROWS_AS(a.data<double>(), strata::invalid_argument);
  CHECK_THROWS_AS(strata::zeros({2}).item(), strata::invalid_argument);
  CHECK(strata::full({1}, 2.5, DType::f64).item() == 2.5);
  CHECK_THROWS_AS(Tensor::empty({2}, DType::f32, strata::Device::cuda(0)), strata::invalid_argument);
}

TEST_CASE("Tensor.Elementwise.BroadcastingMatchesLoops") {
  strata::Generator g(3);
  Tensor a = strata::uniform({4, 1, 3}, -1, 1, g, DType::f64);
  Tensor b = strata::uniform({5, 1}, 1, 2, g, DType::f64);
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  Tensor s = a + b, d = a - b, m = a * b, q = a / b;
  REQUIRE(s.shape() == Shape{4, 5, 3});
  const auto sv = s.to_vector<double>(), dv = d.to_vector<double>(), mv = m.to_vector<double>(), qv = q.to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 3; ++k) {
        const double x = av[static_cast<std::size_t>(i * 3 + k)], y = bv[static_cast<std::size_t>(j)];
        const auto o = static_cast<std::size_t>((i * 5 + j) * 3 + k);
        CHECK(sv[o] == x + y);
        CHECK(dv[o] == x - y);
        CHECK(mv[o] == x * y);
        CHECK(qv[o] == x / y);
      }
  Tensor r = strata::relu(strata::from_vector<double>({4}, {-1, 0, 2, -3}));
  CHECK(r.to_vector<double>() == std::vector<double>{0, 0, 2, 0});
  CHECK_THROWS_AS(strata::zeros({2}) + strata::zeros({2}, DType::f64), strata::invalid_argument);
}

TEST_CASE("Tensor.Reduce.SumAndMeanOverAxes") {
  Tensor x = strata::from_vector<double>({2, 3}, {1, 2, 3, 4, 5, 6}, DType::f64);
  CHECK(strata::sum(x).item() == 21);
  CHECK(strata::mean(x).item() == 3.5);
  CHECK(strata::sum(x, {0}).to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(strata::sum(x, {-1}, true).shape() == Shape{2, 1});
  CHECK(strata::sum(x, {1}).to_vector<double>() == std::vector<double>{6, 15});
  CHECK(strata::mean(x, {1}).to_vector<double>() == std::vector<double>{2, 5});
}

TEST_CASE("Tensor.Metrics.ArgmaxAndAccuracy") {
  Tensor logits = strata::from_vector<double>({3, 3}, {0, 5, 1, 9, 2, 2, 1, 1, 3});
  Tensor labels = strata::from_vector<std::int64_t>({3}, {1, 0, 1});
  CHECK(strata::argmax(logits).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 2});
  CHECK(strata::count_correct(logits, labels) == 2);
  CHECK(strata::accuracy(logits, labels) == doctest::Approx(2.0 / 3.0));
}

TEST_CASE("Tensor.Allocator.ReusesFreedBlocks") {
  auto& alloc = strata::CachingHostAllocator::instance();
  { Tensor warm = Tensor::empty({1000, 37}); }
  const auto before = alloc.stats().system_allocations;
  for (int i = 0; i < 100; ++i) {
    Tensor t = Tensor::empty({1000, 37});
    t.fill_(1);
  }
  CHECK(alloc.stats().system_allocations == before);
  // Every size gets a class at least as large as asked and within 25 % (past 1 KiB).
  for (std::size_t bytes : {1u, 63u, 64u, 1000u, 1025u, 4096u, 100000u, 123456789u}) {
    const auto cls = strata::detail::SizeClasses::index(bytes);
    const auto got = strata::detail::SizeClasses::bytes_of(cls);
    CHECK(got >= bytes);
    if (bytes > 1024) CHECK(got <= bytes + bytes / 4 + 1);
  }
}

TEST_CASE("Tensor.Storage.GivesMemoryBackAndTakesItAgain") {
  auto& alloc = strata::CachingHostAllocator::instance();
  Tensor flat = Tensor::empty({1 << 20});  // 4 MiB
  flat.fill_(1.0);
  const Tensor view = strata::detail::make_view(flat, strata::Shape{256}, strata::Shape{1}, 1000);
  const auto in_use = alloc.stats().bytes_in_use;
  strata::detail::StorageImpl* st = flat.impl()->storage();
  st->give_memory_back();
  CHECK_FALSE(st->holds_memory());
  CHECK(alloc.stats().bytes_in_use + flat.nbytes() <= in_use);
  st->take_memory();  // the views see the new memory
  CHECK(st->holds_memory());
  Tensor(view).fill_(3.0);
  CHECK(flat.to_vector<float>()[1000] == 3.0f);
  CHECK(flat.to_vector<float>()[1255] == 3.0f);
  CHECK(alloc.stats().bytes_in_use == in_use);
  st->take_memory();  // held already: nothing changes
  CHECK(alloc.stats().bytes_in_use == in_use);
}

TEST_CASE("Tensor.Allocator.OutOfMemoryNamesTheBytes") {
#if !defined(__SANITIZE_ADDRESS__)  // (AddressSanitizer's allocator reports an impossible size itself)
  // 16 TiB, which no host here has: an error that names the request and what tensors hold.
  CHECK_THROWS_WITH_AS(Tensor::empty({std::int64_t{1} << 42}),
                       doctest::Contains("out of host memory allocating 16777216.0 MiB"), strata::out_of_memory);
  Tensor fine = Tensor::empty({1000});  // and the allocator serves the next request
  CHECK(fine.raw_data() != nullptr);
#endif
}

TEST_CASE("Tensor.Allocator.LargeBlocksAreWholeHugePages") {
  using strata::detail::HostBacking;
  auto& alloc = strata::CachingHostAllocator::instance();
  const auto aligned_to = [](const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; };
  const std::int64_t n = static_cast<std::int64_t>(HostBacking::kHugeFrom / sizeof(float)) + 12345;  // past the threshold
  const void* first = nullptr;
  {
    Tensor big = Tensor::empty({n});
    first = big.raw_data();
    CHECK(aligned_to(first, HostBacking::kHugePage));
    float* x = big.data<float>();
    for (std::int64_t i = 0; i < n; i += 4093) x[i] = static_cast<float>(i);  // every page writable
    x[n - 1] = -1.0f;
    for (std::int64_t i = 0; i < n; i += 4093) REQUIRE(x[i] == static_cast<float>(i));
    CHECK(x[n - 1] == -1.0f);
  }
  // Freed to the cache and handed out again like any block: no new system allocation.
  const auto before = alloc.stats().system_allocations;
  Tensor again = Tensor::empty({n});
  CHECK(again.raw_data() == first);
  CHECK(alloc.stats().system_allocations == before);
  // Below the threshold: cache-line alignment.
  Tensor small = Tensor::empty({1000, 37});
  CHECK(aligned_to(small.raw_data(), HostBacking::kAlignment));
}

TEST_CASE("a cuda tensor in a program without CUDA kernels is an error that says what to add") {
  REQUIRE_FALSE(strata::has_cuda_backend());  // this program includes no .cuh
  CHECK_THROWS_WITH_AS(strata::Tensor::empty({2, 2}, strata::DType::f32, strata::Device::cuda(0)),
                       doctest::Contains("<strata/tensor/cuda/backend.cuh>"), strata::invalid_argument);
  CHECK_THROWS_WITH_AS(strata::ones({2}).to(strata::Device::cuda(0)), doctest::Contains("-Dcuda=enabled"),
                       strata::invalid_argument);
}

TEST_CASE("to_vector and to() of a strided host view read it in row-major order") {
  strata::Tensor t = strata::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  // The transpose as a view: shape [3, 2], strides [1, 3].
  const strata::Tensor v = strata::detail::make_view(t, {3, 2}, {1, 3}, 0);
  REQUIRE_FALSE(v.is_contiguous());
  CHECK(v.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(same_tensor(v.to(strata::Device::cpu()), v));  // already there: the same tensor
}

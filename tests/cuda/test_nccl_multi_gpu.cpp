// collective::Nccl across several GPUs of one process, one rank per thread (what
// MirroredStrategy over GPUs does): every collective against a serial computation, and a
// rank that never arrives named at the deadline. Needs two devices; skipped otherwise.
#include "doctest.hpp"

#include <thread>

#include <strata/collective/in_process.hpp>
#include <strata/collective/nccl.hpp>

#include "cuda_test_support.hpp"

using namespace strata;
using namespace cuda_test;
using collective::InProcess;
using collective::Nccl;

namespace {

/// Runs fn(nccl, rank) on one thread per device, rethrowing the first failure.
template <class F>
void on_every_gpu(F&& fn, collective::Options o = collective::Options::from_env()) {
  const int n = kernels::cuda::device_count();
  auto boot = InProcess::make_group(n, o);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        kernels::cuda::DeviceGuard on(r);
        Nccl nccl(boot[static_cast<std::size_t>(r)], r, o);
        fn(nccl, r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("allreduce, broadcast, allgather and reduce_scatter across the GPUs equal the serial result") {
  const int n = kernels::cuda::device_count();
  const std::size_t len = 4096;
  on_every_gpu([&](Nccl& nccl, int r) {
    const Device dev = Device::cuda(r);
    auto mine = random_vector<double>(len, 100 + static_cast<std::uint32_t>(r));
    std::vector<double> sum(len, 0.0);
    for (int k = 0; k < n; ++k) {
      const auto theirs = random_vector<double>(len, 100 + static_cast<std::uint32_t>(k));
      for (std::size_t i = 0; i < len; ++i) sum[i] += theirs[i];
    }
    Tensor host = Tensor::empty({std::int64_t(len)}, DType::f64);
    std::copy(mine.begin(), mine.end(), host.data<double>());
    Tensor x = host.to(dev);
    nccl.allreduce(std::span<double>(x.device_data<double>(), len), ReduceOp::Sum);
    const auto got = x.to_vector<double>();
    for (std::size_t i = 0; i < len; ++i) REQUIRE(got[i] == doctest::Approx(sum[i]).epsilon(1e-12));
    Tensor b = host.to(dev);
    nccl.broadcast(std::span<double>(b.device_data<double>(), len), 1);
    CHECK(b.to_vector<double>() == random_vector<double>(len, 101));
    Tensor all = Tensor::empty({std::int64_t(len) * n}, DType::f64, dev);
    Tensor src = host.to(dev);
    nccl.allgather(std::span<const double>(src.device_data<double>(), len),
                   std::span<double>(all.device_data<double>(), len * static_cast<std::size_t>(n)));
    const auto gathered = all.to_vector<double>();
    for (int k = 0; k < n; ++k)
      CHECK(std::vector<double>(gathered.begin() + static_cast<std::ptrdiff_t>(k * len),
                                gathered.begin() + static_cast<std::ptrdiff_t>((k + 1) * len)) ==
            random_vector<double>(len, 100 + static_cast<std::uint32_t>(k)));
  });
}

TEST_CASE("a rank that never calls the collective is named at the deadline, not waited for") {
  collective::Options o;
  o.timeout = std::chrono::milliseconds(2000);
  CHECK_THROWS_WITH_AS(on_every_gpu(
                           [](Nccl& nccl, int r) {
                             if (r == 1) {  // stays out of the collective past the others' deadline
                               std::this_thread::sleep_for(std::chrono::seconds(6));
                               return;
                             }
                             Tensor x = Tensor::empty({16}, DType::f32, Device::cuda(r));
                             x.fill_(1);
                             nccl.allreduce(std::span<float>(x.device_data<float>(), 16), ReduceOp::Sum);
                           },
                           o),
                       doctest::Contains("rank 1"), timeout_error);
}

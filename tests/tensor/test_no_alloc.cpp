// The steady-state training step allocates nothing from the system: this program replaces
// the global operator new to count every allocation on every thread while a step runs.
#include "doctest.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#include "fashion_mnist/models.hpp"
#include "fashion_mnist/step.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

void* counted(std::size_t n, std::size_t align) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted(n, 0); }
void* operator new[](std::size_t n) { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

long steady_state_allocations(strata::nn::Sequential model, strata::Shape example_shape) {
  const std::int64_t n = 64 * 40;
  strata::Generator g(1);
  std::vector<std::int64_t> dims{n};
  for (auto d : example_shape) dims.push_back(d);
  strata::Tensor x = strata::uniform(strata::Shape(std::span<const std::int64_t>(dims)), 0, 1, g);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  strata::Tensor y = strata::from_vector<std::int64_t>({n}, labels);

  strata::OneDeviceStrategy strategy;
  strata::optim::Sgd opt(model.parameters(), 0.05, 0.9);
  auto data = strategy.distribute(strata::data::Pipeline(strata::data::TensorDataset(x, y)).shuffle(0).batch(64));
  int step = 0;
  for (auto& batch : data) {
    if (step == 8) counting = true;  // warm-up: caches, momentum buffers, tape capacity
    (void)fmnist::train_step(strategy, model, opt, batch);
    if (++step == 38) counting = false;
  }
  counting = false;
  return allocations.exchange(0);
}

}  // namespace

TEST_CASE("Tensor.Allocator.SteadyStateMlpStepAllocatesNothing") {
  const auto before = strata::CachingHostAllocator::instance().stats();
  CHECK(steady_state_allocations(fmnist::make_mlp(), {1, 28, 28}) == 0);
  CHECK(strata::CachingHostAllocator::instance().stats().cache_hits > before.cache_hits);
}

TEST_CASE("Tensor.Allocator.SteadyStateCnnStepAllocatesNothing") {
  CHECK(steady_state_allocations(fmnist::make_cnn(), {1, 28, 28}) == 0);
}

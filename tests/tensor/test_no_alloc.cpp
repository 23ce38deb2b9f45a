// The steady-state training step allocates nothing from the system: this program replaces
// the global operator new to count every allocation on every thread while a step runs.
#include "doctest.hpp"

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

#include <strata/models/char_transformer.hpp>

#include "support/train_step.hpp"

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

// What 30 counted steps took from the system: allocations through operator new, and how much
// the pools grew. A pool grows only when more of its blocks (or objects) are held at once than
// ever before: the host allocator's blocks come from aligned_alloc, and their free list making
// room for one is at most one allocation; a storage or tensor header is one allocation, and
// at most one more for its free list.
struct Counted {
  long allocations = 0;
  std::uint64_t host_blocks = 0, objects = 0;
  std::uint64_t growth() const { return host_blocks + objects; }
  long explained_by_growth() const { return static_cast<long>(host_blocks + 2 * objects); }
};

std::uint64_t host_blocks() { return strata::CachingHostAllocator::instance().stats().system_allocations; }
std::uint64_t objects() {
  return strata::detail::ObjectPool<strata::detail::StorageImpl>::instance().made() +
         strata::detail::ObjectPool<strata::detail::TensorImpl>::instance().made();
}

template <strata::Strategy S, class Make>
Counted steady_state_allocations(S& strategy, Make make, strata::Shape example_shape, std::int64_t per_replica = 64) {
  const std::int64_t n = per_replica * 60 * strategy.num_replicas_in_sync();  // 60 steps
  strata::Generator g(1);
  std::vector<std::int64_t> dims{n};
  for (auto d : example_shape) dims.push_back(d);
  strata::Tensor x = strata::uniform(strata::Shape(std::span<const std::int64_t>(dims)), 0, 1, g);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  strata::Tensor y = strata::from_vector<std::int64_t>({n}, labels);

  auto model = strategy.scope(make);
  auto opt = strategy.scope([&] { return strata::optim::Sgd(model.parameters(), 0.05, 0.9); });
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();
  const std::int64_t batch = per_replica * strategy.num_replicas_in_sync();
  auto data = strategy.distribute(strata::data::Pipeline(strata::data::TensorDataset(x, y)).shuffle(0).batch(batch));
  int step = 0;
  Counted counted;
  for (auto& batch : data) {
    // Warm-up: caches, momentum buffers, tapes, and the pools' peak when replica threads
    // and the prefetch thread overlap; then 30 counted steps, ending before the epoch does.
    if (step == 20) counted.host_blocks = host_blocks(), counted.objects = objects(), counting = true;
    (void)support::train_step(strategy, model, opt, batch);
    if (++step == 50) {
      counting = false;
      counted.host_blocks = host_blocks() - counted.host_blocks, counted.objects = objects() - counted.objects;
    }
  }
  counting = false;
  counted.allocations = allocations.exchange(0);
  return counted;
}

// With replica threads: nothing is allocated per step, but a pool's peak can rise late in a
// run, when two replica threads and the prefetch thread happen to hold more of its blocks at
// once than ever before (0-4 blocks or headers in 30 steps, in about 1 run of 4). So every
// counted allocation must be a pool growing, and the pools must grow by fewer than one block
// every two steps; a block held over from each step, or anything allocated each step, shows
// as 30 or more.
void check_nothing_per_step(const Counted& counted) {
  CHECK(counted.allocations <= counted.explained_by_growth());
  CHECK(counted.growth() < 15);
}

}  // namespace

TEST_CASE("Tensor.Allocator.GivingBlocksBackAllocatesNothing") {
  // More blocks of one class held at once than ever before, then all given back: the free
  // list had its room reserved when each block was made (it grew inside the giving back
  // before, an allocation in a step that happened to hold one batch more than the others).
  strata::detail::SizeClassCache<strata::detail::HostBacking> cache;
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(cache.allocate(5000));
  counting = true;
  for (void* p : blocks) cache.deallocate(p, 5000);
  for (int round = 0; round < 3; ++round) {  // and taken and given back again, served from the list
    for (void*& p : blocks) p = cache.allocate(5000);
    for (void* p : blocks) cache.deallocate(p, 5000);
  }
  counting = false;
  CHECK(allocations.exchange(0) == 0);
  CHECK(cache.stats().system_allocations == 100);
  cache.empty_cache();
  CHECK(cache.stats().bytes_cached == 0);
}

TEST_CASE("Tensor.Allocator.GivingHeadersBackAllocatesNothing") {
  // Storage and tensor headers: more alive at once than ever before, then all let go; their
  // free lists had room reserved when each was made.
  std::vector<strata::Tensor> held;
  held.reserve(5000);
  for (int i = 0; i < 5000; ++i) held.push_back(strata::Tensor::empty({2}));
  const auto made = objects();
  counting = true;
  held.clear();
  for (int round = 0; round < 3; ++round) {  // and made and let go again, from the free lists
    for (int i = 0; i < 5000; ++i) held.push_back(strata::Tensor::empty({2}));
    held.clear();
  }
  counting = false;
  CHECK(allocations.exchange(0) == 0);
  CHECK(objects() == made);
}

TEST_CASE("Tensor.Allocator.SteadyStateMlpStepAllocatesNothing") {
  const auto before = strata::CachingHostAllocator::instance().stats();
  strata::OneDeviceStrategy strategy;
  CHECK(steady_state_allocations(strategy, strata::models::fashion_mnist_mlp, {1, 28, 28}).allocations == 0);
  CHECK(strata::CachingHostAllocator::instance().stats().cache_hits > before.cache_hits);
}

TEST_CASE("Tensor.Allocator.SteadyStateCnnStepAllocatesNothing") {
  strata::OneDeviceStrategy strategy;
  CHECK(steady_state_allocations(strategy, strata::models::fashion_mnist_cnn, {1, 28, 28}).allocations == 0);
}

TEST_CASE("Tensor.Allocator.SteadyStateResNetStepAllocatesNothing") {
  // Batch norm's statistics, residual additions, global average pooling (4 images a step:
  // the sanitizer build runs at -O0).
  strata::OneDeviceStrategy strategy;
  CHECK(steady_state_allocations(strategy, [] { return strata::models::fashion_mnist_resnet(); }, {1, 28, 28}, 4).allocations == 0);
}

TEST_CASE("Tensor.Allocator.SteadyStateTransformerStepAllocatesNothing") {
  // Embeddings, causal attention through strided views, LayerNorm, GELU, Adam: 20 warm-up
  // steps, then 30 counted ones (a small shape: the sanitizer build runs at -O0).
  strata::manual_seed(0);
  strata::models::CharTransformer model({.vocab = 17, .context = 16, .width = 32, .heads = 4, .layers = 2});
  strata::optim::Adam opt(model.parameters(), 1e-3);
  strata::Generator g(2);
  std::vector<std::int64_t> tokens(2 * 16), next(2 * 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int64_t>(g.below(17)), next[i] = static_cast<std::int64_t>(g.below(17));
  const strata::Tensor x = strata::from_vector<std::int64_t>({2, 16}, tokens), y = strata::from_vector<std::int64_t>({32}, next);
  for (int step = 0; step < 50; ++step) {
    if (step == 20) counting = true;
    strata::Tensor loss = strata::nn::cross_entropy(strata::reshape(model(x), {32, 17}), y);
    opt.apply_gradients(strata::grad(loss, model.parameters()));
  }
  counting = false;
  CHECK(allocations.exchange(0) == 0);
}

// Under the 16-bit policies: the GEMMs' packing and rounding buffers grow once; float16's loss
// scale (the scaled loss, the division and check of the gradients, and with sharded sums the
// wait for the shares to be read) takes nothing per step.
TEST_CASE("Tensor.Allocator.SteadySixteenBitStepsAllocateNothing") {
  for (const strata::precision::Policy policy : {strata::precision::bfloat16, strata::precision::float16}) {
    CAPTURE(strata::precision::name_of(policy));
    const strata::precision::Scope scope(policy);
    strata::OneDeviceStrategy one;
    CHECK(steady_state_allocations(one, strata::models::fashion_mnist_cnn, {1, 28, 28}).allocations == 0);
  }
  const strata::precision::Scope fp16(strata::precision::float16);
  strata::MirroredStrategy sharded(2, {.bucket_bytes = 256 * 1024,
                                       .split_update = strata::UpdateSplit::on,
                                       .gradients = strata::GradientLayout::sharded});
  check_nothing_per_step(steady_state_allocations(sharded, strata::models::fashion_mnist_mlp, {1, 28, 28}));
}

// Every replica thread, the gradient engine's buckets and the strategy's hand-off included,
// with whole and with sharded gradients. The update split held: under UpdateSplit::measured a
// switch between the two ways (a probe now and then, none per step) hands the optimizer other
// state tensors, and that bookkeeping allocates a few vectors.
TEST_CASE("Tensor.Allocator.SteadyStateMirroredStepAllocatesNothingPerStep") {
  strata::MirroredStrategy mirrored(2, {.bucket_bytes = 256 * 1024, .split_update = strata::UpdateSplit::on});
  check_nothing_per_step(steady_state_allocations(mirrored, strata::models::fashion_mnist_mlp, {1, 28, 28}));
  strata::MirroredStrategy sharded(2, {.bucket_bytes = 256 * 1024,
                                       .split_update = strata::UpdateSplit::on,
                                       .gradients = strata::GradientLayout::sharded});
  check_nothing_per_step(steady_state_allocations(sharded, strata::models::fashion_mnist_mlp, {1, 28, 28}));
  strata::CentralStorageStrategy central(2);
  check_nothing_per_step(steady_state_allocations(central, strata::models::fashion_mnist_mlp, {1, 28, 28}));
  // Per-replica norms: their running statistics queue up until the step's end.
  strata::MirroredStrategy resnet(2, {.bucket_bytes = 256 * 1024, .split_update = strata::UpdateSplit::on});
  check_nothing_per_step(
      steady_state_allocations(resnet, [] { return strata::models::fashion_mnist_resnet(); }, {1, 28, 28}, 4));
}

#if STRATA_HAS_GLOO
// The multi-process path: the engine hands each bucket to its communication thread every step
// (a process of one here, so nothing crosses a wire, but the hand-off is the same).
TEST_CASE("Tensor.Allocator.SteadyStateMultiWorkerStepAllocatesNothingPerStep") {
  strata::MultiWorkerMirroredStrategy<strata::collective::Gloo> mwm({.bucket_bytes = 256 * 1024});
  check_nothing_per_step(steady_state_allocations(mwm, strata::models::fashion_mnist_mlp, {1, 28, 28}));
}
#endif

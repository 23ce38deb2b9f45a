/// \file
/// The split optimizer update (detail::PartitionedUpdate) across the processes of one host, for
/// MultiWorkerMirroredStrategy: each rank's copy of a model's parameters moves into memory
/// the ranks share, so that rank r can update its share of every parameter in its own copy
/// and write it straight into the others' copies, as MirroredStrategy's threads do; the
/// optimizer state the ranks' optimizers share lives there too (one region for all), so
/// state() on any rank — the chief's, which a checkpoint saves — is complete.
/// docs/performance.md, "The split optimizer update".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/collective/capabilities.hpp>
#include <strata/reducer/gradient_engine.hpp>
#include <strata/reducer/partitioned_update.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// Byte offsets of tensors (`describe` gives each one's tensor) laid one after another, each
/// at a multiple of 64 bytes (a cache line); the last entry is the total.
template <class Tensors, class Describe>
std::vector<std::size_t> packed_offsets(const Tensors& tensors, Describe&& describe) {
  std::vector<std::size_t> at{0};
  for (const auto& t : tensors) {
    const Tensor& x = describe(t);
    at.push_back((at.back() + x.nbytes() + 63) / 64 * 64);
  }
  return at;
}

/// Tensors shaped like `like`, over `base` (a shared region) at `offsets`, keeping it mapped.
template <class Tensors, class Describe>
std::vector<Tensor> views_over(const Tensor& base, const std::vector<std::size_t>& offsets, const Tensors& like,
                               Describe&& describe) {
  auto keep = std::make_shared<Tensor>(base);
  std::vector<Tensor> out;
  std::size_t i = 0;
  for (const auto& t : like) {
    const Tensor& x = describe(t);
    out.push_back(tensor_over(static_cast<char*>(base.raw_data()) + offsets[i++], x.shape(), x.dtype(), keep));
  }
  return out;
}

/// The state home of a split across processes (PartitionedUpdate::StateHome): tensors named and
/// shaped like an optimizer's state, in a common buffer (one region every rank maps), so
/// that every rank's optimizer holds the same memory. The buffer is made (collectively) on the
/// first call, and again only if the state's names or shapes change; every rank's optimizer
/// is of the same kind over the same shapes, so every rank decides the same.
template <collective::HostSharedMemory C>
PartitionedUpdate::StateHome shared_state_home(C& comm) {
  auto tensors = std::make_shared<PartitionedUpdate::NamedState>();
  return [&comm, tensors](const PartitionedUpdate::NamedState& like) {
    if (same_layout(*tensors, like)) return *tensors;
    auto tensor_of = [](const std::pair<std::string, Tensor>& named) -> const Tensor& { return named.second; };
    const std::vector<std::size_t> at = packed_offsets(like, tensor_of);
    const Tensor home = comm.shared_buffer(static_cast<std::int64_t>(std::max<std::size_t>(at.back(), 1)), DType::u8,
                                           /*common=*/true);
    STRATA_REQUIRE(home.defined(), invalid_argument, "strata.strategy",
                   "MultiWorkerMirroredStrategy: no shared memory (/dev/shm) for the "
                   "optimizer state of the split update (", at.back(),
                   " bytes); free /dev/shm or set STRATA_SPLIT_UPDATE=0");
    std::vector<Tensor> views = views_over(home, at, like, tensor_of);
    tensors->clear();
    for (std::size_t k = 0; k < like.size(); ++k) tensors->emplace_back(like[k].first, std::move(views[k]));
    return *tensors;
  };
}

/// A PartitionedUpdate of `params` (this rank's copy of one model, its gradients served by
/// `engine`) across the ranks of `comm`, or null — on every rank alike — where the ranks share
/// no memory (they span hosts, STRATA_SHM=0, a single rank) or the parameters are not
/// contiguous host tensors. Collective. Moves each parameter's values into the shared
/// buffer: the tensors keep their identity, every handle to them sees the new storage.
template <collective::HostSharedMemory C>
std::unique_ptr<PartitionedUpdate> split_across_processes(C& comm, const std::vector<Tensor>& params,
                                                    const GradientEngine<C>& engine,
                                                    std::optional<SplitChoiceOptions> measured = std::nullopt) {
  const int n = comm.size(), me = comm.rank();
  if (n < 2 || params.empty()) return nullptr;
  for (const Tensor& p : params)  // the same model on every rank: every rank decides the same
    if (p.device().kind != DeviceKind::cpu || !p.is_contiguous()) return nullptr;
  auto tensor_of = [](const Tensor& t) -> const Tensor& { return t; };
  const std::vector<std::size_t> at = packed_offsets(params, tensor_of);
  // After the copy, one cache line: in rank 0's region, the way rank 0 chose (PartitionedUpdate::end).
  const std::size_t ways_at = at.back();
  const Tensor mine = comm.shared_buffer(static_cast<std::int64_t>(ways_at + 64), DType::u8);
  if (!mine.defined()) return nullptr;
  std::vector<std::vector<Tensor>> copies(static_cast<std::size_t>(n));
  std::vector<std::vector<optim::ElementRange>> shares;
  for (int k = 0; k < n; ++k) {
    if (k == me) {
      std::vector<Tensor> own = views_over(mine, at, params, tensor_of);
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::memcpy(own[i].raw_data(), params[i].raw_data(), params[i].nbytes());
        params[i].impl()->share_storage_of(*own[i].impl());
      }
      copies[static_cast<std::size_t>(k)] = params;
    } else {
      copies[static_cast<std::size_t>(k)] = views_over(comm.shared_peer(mine, k), at, params, tensor_of);
    }
    shares.push_back(engine.shares(k, n));
  }
  if (me == 0) std::memset(static_cast<char*>(mine.raw_data()) + ways_at, 0, 64);  // read after the first all-reduce
  const Tensor chief = me == 0 ? mine : comm.shared_peer(mine, 0);
  Tensor ways = tensor_over(static_cast<char*>(chief.raw_data()) + ways_at, Shape{2}, DType::i32,
                            std::make_shared<Tensor>(chief));
  return std::make_unique<PartitionedUpdate>(std::move(copies), std::move(shares), shared_state_home(comm), me,
                                       [&comm, mine] { comm.shared_sync(mine); }, measured, std::move(ways));
}

}  // namespace strata::detail

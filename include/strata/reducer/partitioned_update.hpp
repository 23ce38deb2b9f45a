/// \file
/// PartitionedUpdate: the optimizer update of one model's mirrored copies, split across the
/// replicas. After the all-reduce every replica holds the same summed gradients, and would
/// apply the same update to its own copy: N times the same memory-bound pass. Instead replica
/// r updates only its share of each parameter (the share of each bucket it reduced, so the
/// summed gradient is still in its cache), writes the new values of that share into the other
/// copies (publish), and keeps the optimizer state of that share; one barrier then makes every
/// copy whole before any replica goes on. The replicas' optimizers hold one set of state
/// tensors (a StateHome), each updating its own ranges of them, so state() of any replica is
/// complete: what a checkpoint saves. Gradients are not touched: every replica still holds
/// the whole sum (docs/performance.md, "The split optimizer update"). Where writing into the
/// other copies costs more than it saves, every replica updates all of its copy instead:
/// with UpdateSplit::measured, replica 0 times each step's update and a SplitChoice picks the
/// way of the next one (begin(), end()); the bits are the same either way.
///
/// MirroredStrategy's replicas are threads of one process: their copies are plain host
/// tensors and the state home is one set of host tensors (local_state_home).
/// CentralStorageStrategy's "copies" are views of one storage: each replica's update lands
/// where every replica reads, so publishing writes nothing and only shares the state.
/// MultiWorkerMirroredStrategy's ranks on one host split the update the same way
/// (detail::split_across_processes): each rank's copy lives in memory the ranks share, the
/// others' copies are views of theirs, the barrier goes through that memory, and so does the
/// state home.
#pragma once


#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/observe/timeline.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/reducer/options.hpp>
#include <strata/reducer/split_choice.hpp>
#include <strata/runtime/process.hpp>  // env
#include <strata/support/check.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

/// The SplitChoice options a PartitionedUpdate in `mode` measures with; none where every step splits.
inline std::optional<SplitChoiceOptions> measured_choice(UpdateSplit mode, const SplitChoiceOptions& o) {
  return mode == UpdateSplit::measured ? std::optional(o) : std::nullopt;
}

/// Whether `like` names the same tensors, with the same shapes and dtypes, as `home`.
inline bool same_layout(const std::vector<std::pair<std::string, Tensor>>& home,
                        const std::vector<std::pair<std::string, Tensor>>& like) {
  if (like.size() != home.size()) return false;
  for (std::size_t k = 0; k < like.size(); ++k)
    if (like[k].first != home[k].first || like[k].second.shape() != home[k].second.shape() ||
        like[k].second.dtype() != home[k].second.dtype())
      return false;
  return true;
}

class PartitionedUpdate {
 public:
  using NamedState = std::vector<std::pair<std::string, Tensor>>;
  /// Where the replicas' optimizers keep their one set of state tensors: given a replica's
  /// state (its names and shapes), the tensors every replica is to hold instead. Every
  /// replica calls it after its update whenever its state tensors changed (the first update,
  /// load_state); the first call for a layout makes the tensors. Across processes it is
  /// collective where it makes them.
  using StateHome = std::function<NamedState(const NamedState&)>;

  /// copies[r]: replica r's parameters; shares[r][k]: the elements of parameter k replica r
  /// updates (the shares of one parameter are disjoint and cover it). `only`: the one replica
  /// this process serves when the replicas are processes (its copies are its parameters, the
  /// others views of the other ranks' copies), -1 for all of them (threads). `sync`: a barrier
  /// of the replicas, where the split brings its own. `measured`: given, each step splits or
  /// not as a SplitChoice with these options decides (else every step splits); `ways`: where
  /// replica 0 leaves that decision for the others, 8 zero bytes every replica sees (across
  /// processes: memory they share), or undefined to make them here.
  PartitionedUpdate(std::vector<std::vector<Tensor>> copies, std::vector<std::vector<optim::ElementRange>> shares,
              StateHome home, int only = -1, std::function<void()> sync = {},
              std::optional<SplitChoiceOptions> measured = std::nullopt, Tensor ways = {})
      : copies_(std::move(copies)), shares_(std::move(shares)), home_(std::move(home)), only_(only),
        sync_(std::move(sync)), optimizers_(copies_.size(), nullptr), shared_at_(copies_.size(), ~std::uint64_t{0}),
        steps_(copies_.size(), 0), splitting_(copies_.size(), 1), own_(copies_.size()),
        ways_(ways.defined() ? std::move(ways) : Tensor::empty({2}, DType::i32).fill_(0.0)) {
    STRATA_CHECK(copies_.size() == shares_.size() && !copies_.empty() && home_, "PartitionedUpdate: one share per copy, and "
                 "a state home");
    STRATA_CHECK(only_ < static_cast<int>(copies_.size()), "PartitionedUpdate: replica ", only_, " of ", copies_.size());
    STRATA_CHECK(ways_.nbytes() >= 2 * sizeof(std::uint32_t) && ways_.is_contiguous() &&
                     reinterpret_cast<std::uintptr_t>(ways_.raw_data()) % alignof(std::uint32_t) == 0,
                 "PartitionedUpdate: two aligned words for the choice");
    for (std::size_t r = 0; r < copies_.size(); ++r) {
      STRATA_CHECK(copies_[r].size() == copies_[0].size() && shares_[r].size() == copies_[0].size(),
                   "PartitionedUpdate: replica ", r, " has another parameter list");
      for (const Tensor& p : copies_[r])
        STRATA_CHECK(p.device().kind == DeviceKind::cpu && p.is_contiguous(), "PartitionedUpdate: parameters on the host");
    }
    if (only_ >= 0)
      for (const Tensor& p : copies_[static_cast<std::size_t>(only_)]) placed_.push_back(p.raw_data());
    if (measured) choice_ = std::make_unique<SplitChoice>(*measured);
  }

  /// Replica r starts its update with `opt`: whether it updates its share (ranges(), then
  /// publish()) or all of its copy. Every replica goes the same way in a step: replica 0
  /// decided it at the end of the last one (end()). A replica that updates all of its copy
  /// needs state of its own: it takes a copy of the state home's tensors.
  bool begin(int r, optim::Optimizer& opt) {
    const std::size_t me = index(r);
    // Every replica reads the word, whatever its own options say: replica 0's choice rules.
    const bool split = will_split(r);
    splitting_[me] = split;
    if (!split && shared_at_[me] == opt.state_version()) {  // it holds the home's tensors
      const NamedState home = opt.state();
      NamedState& own = own_[me];  // its tensors are kept: a later switch copies into them
      if (!same_layout(own, home)) {
        own = home;
        for (auto& named : own) named.second = named.second.clone();
      } else {
        NoGradGuard no_grad;
        for (std::size_t k = 0; k < own.size(); ++k) own[k].second.copy_(home[k].second);
      }
      const std::vector<optim::ElementRange> none(opt.params().size());
      opt.share_state_from(own, none);
    }
    if (r == 0 && choice_) began_ = std::chrono::steady_clock::now();
    return split;
  }

  /// Whether replica r's update in flight (since begin()) splits.
  bool splitting(int r) const { return splitting_[index(r)] != 0; }
  /// Whether replica r's next update will split, as replica 0 left it; the same on every
  /// replica once the step's first collective has ordered replica 0's write (end()) before it.
  bool will_split(int r) const { return way(steps_[index(r)]).load(std::memory_order_acquire) == kSplit; }

  /// After replica r's update (and publish(), when it split): replica 0 hands the others the
  /// way of the next step. The next step's all-reduce orders that write before their reads,
  /// and the two words alternate, so a word is not written again before everyone has read it.
  void end(int r) {
    const std::size_t me = index(r);
    const std::uint64_t step = steps_[me]++;
    if (r != 0 || !choice_) return;
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - began_).count();
    const bool next = choice_->after(splitting_[me] != 0, us);
    way(step + 1).store(next ? kSplit : kWhole, std::memory_order_release);
  }

  /// Whether `g` holds the gradients of replica r's copy (its whole parameter list, in order).
  bool covers(int r, const Gradients& g) const { return g.of(copies_[index(r)]); }

  /// Replica r's ranges, for `opt`, its optimizer over its copy.
  const std::vector<optim::ElementRange>& ranges(int r, optim::Optimizer& opt) {
    optimizers_[index(r)] = &opt;
    return shares_[index(r)];
  }

  /// After replica r has updated its ranges: writes them into the other copies, and hands its
  /// optimizer the state home's tensors (copying its ranges into them) if its own state
  /// tensors changed. The caller then waits for every replica's publish (barrier()) before it
  /// goes on; nothing reads another copy after that, so code after apply_gradients may change
  /// its own.
  void publish(int r) {
    const std::size_t me = index(r);
    for (std::size_t k = 0; k < placed_.size(); ++k)  // the others write into this copy where it was placed
      STRATA_CHECK(copies_[me][k].raw_data() == placed_[k], "split update: parameter ", k, " of rank ", r,
                   " no longer lives in the memory the ranks share (its storage was replaced after scope())");
    {
      observe::ScopedEvent ev("publish update", "communication");
      for (std::size_t s = 0; s < copies_.size(); ++s) {
        if (s == me) continue;
        for (std::size_t k = 0; k < copies_[me].size(); ++k) {
          const optim::ElementRange range = shares_[me][k];
          // Views of one storage (CentralStorageStrategy) hold the update already.
          if (range.end <= range.begin || copies_[s][k].raw_data() == copies_[me][k].raw_data()) continue;
          const std::size_t es = size_of(copies_[me][k].dtype());
          const std::size_t offset = static_cast<std::size_t>(range.begin) * es;
          std::memcpy(static_cast<char*>(copies_[s][k].raw_data()) + offset,
                      static_cast<const char*>(copies_[me][k].raw_data()) + offset,
                      static_cast<std::size_t>(range.end - range.begin) * es);
        }
      }
    }
    optim::Optimizer* mine = optimizers_[me];
    if (mine != nullptr && shared_at_[me] != mine->state_version()) {
      mine->share_state_from(home_(mine->state()), shares_[me]);
      shared_at_[me] = mine->state_version();
    }
  }

  /// A barrier of the replicas, where the split brings its own (across processes); false if
  /// the caller's group barrier is the one to use.
  bool barrier() const {
    if (!sync_) return false;
    sync_();
    return true;
  }

 private:
  static constexpr std::uint32_t kSplit = 0, kWhole = 1;  // zero bytes: split

  std::atomic_ref<std::uint32_t> way(std::uint64_t step) const {
    return std::atomic_ref<std::uint32_t>(static_cast<std::uint32_t*>(ways_.raw_data())[step % 2]);
  }

  std::size_t index(int r) const {
    STRATA_CHECK(r >= 0 && static_cast<std::size_t>(r) < copies_.size() && (only_ < 0 || r == only_),
                 "PartitionedUpdate: replica ", r, " of ", copies_.size());
    return static_cast<std::size_t>(r);
  }

  std::vector<std::vector<Tensor>> copies_;
  std::vector<std::vector<optim::ElementRange>> shares_;
  StateHome home_;
  int only_;
  std::function<void()> sync_;
  std::vector<optim::Optimizer*> optimizers_;  // each replica's, set by ranges() every step
  std::vector<std::uint64_t> shared_at_;       // each replica's state version when it last took the home's tensors
  std::vector<const void*> placed_;            // across processes: where this rank's copy was placed
  std::vector<std::uint64_t> steps_;           // each replica's updates so far
  std::vector<char> splitting_;                // whether each replica's update in flight splits
  std::vector<NamedState> own_;                // each replica's state while it updates all of its copy
  Tensor ways_;                                // the way of even and odd steps (kSplit, kWhole)
  std::unique_ptr<SplitChoice> choice_;        // replica 0's, when measured
  std::chrono::steady_clock::time_point began_;
};

/// The state home of replicas that are threads of one process: host tensors, made by the
/// first replica that asks for a layout (zero-filled: each replica copies its ranges in).
inline PartitionedUpdate::StateHome local_state_home() {
  struct Home {
    std::mutex mu;
    PartitionedUpdate::NamedState tensors;
  };
  return [home = std::make_shared<Home>()](const PartitionedUpdate::NamedState& like) {
    std::lock_guard lock(home->mu);
    if (!same_layout(home->tensors, like)) {
      home->tensors.clear();
      for (const auto& [name, t] : like)
        home->tensors.emplace_back(name, Tensor::empty(t.shape(), t.dtype(), t.device()).fill_(0.0));
    }
    return home->tensors;
  };
}

}  // namespace strata::detail

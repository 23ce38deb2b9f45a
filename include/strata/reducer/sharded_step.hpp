/// \file
/// ShardedStep: where a step of a gradient engine made for GradientLayout::sharded stands —
/// its sums whole, in this replica's shares, gathered again, or used by the update — and
/// WholeStep, the same questions for an engine whose sums are always whole (the processes'
/// collectives), answered at compile time: such an engine carries no state for them.
///
///   whole, consumed ──a gradient final──► deciding ──bucket 0 reduced──► whole (sums whole)
///                                                                   └─► sharing (in shares)
///   sharing ──every bucket reduced──► in_shares ──consume()──► consumed
///   sharing, in_shares ──gathered()──► gathered ──consume()──► whole
#pragma once

#include <cstdint>

namespace strata::detail {

/// Where one step's summed gradients are (ShardedStep's states).
enum class StepSums : std::uint8_t {
  whole,      ///< whole in every replica's buffers (or no step has begun)
  deciding,   ///< the step began, its first bucket not reduced yet
  sharing,    ///< the step's buckets are being reduced to this replica's shares
  in_shares,  ///< every bucket reduced; the sums in shares only
  gathered,   ///< the sums were in shares, now whole (read before apply_gradients)
  consumed,   ///< apply_gradients has used the sums in shares; reading them is an error
};

/// A sharded-layout engine's step, advanced by the engine at each event above.
class ShardedStep {
 public:
  StepSums sums() const noexcept { return sums_; }
  void begin() noexcept { sums_ = StepSums::deciding; }
  /// The first bucket reduced, to shares or whole.
  void decided(bool in_shares) noexcept {
    if (sums_ == StepSums::deciding) sums_ = in_shares ? StepSums::sharing : StepSums::whole;
  }
  void finished() noexcept {
    if (sums_ == StepSums::sharing) sums_ = StepSums::in_shares;
  }
  void gathered() noexcept { sums_ = StepSums::gathered; }
  void consume() noexcept {
    if (sums_ == StepSums::in_shares)
      sums_ = StepSums::consumed;
    else if (sums_ == StepSums::gathered)
      sums_ = StepSums::whole;
  }
  /// Buckets of the step may still be unreduced (and the step's layout undecided).
  bool unsettled() const noexcept { return sums_ == StepSums::deciding || sums_ == StepSums::sharing; }
  /// The sums are (or will be) in shares and not gathered.
  bool in_shares() const noexcept { return sums_ == StepSums::sharing || sums_ == StepSums::in_shares; }
  /// The Gradients grad() returns must carry the engine to complete them.
  bool claims() const noexcept { return sums_ == StepSums::deciding || in_shares(); }
  /// This step's buckets were reduced to shares (gathered since, or not).
  bool sharded() const noexcept { return in_shares() || sums_ == StepSums::gathered; }
  bool readable() const noexcept { return sums_ != StepSums::consumed; }

 private:
  StepSums sums_ = StepSums::whole;
};

/// The step of an engine whose sums are always whole: ShardedStep's interface, no state.
struct WholeStep {
  static constexpr StepSums sums() noexcept { return StepSums::whole; }
  static constexpr void begin() noexcept {}
  static constexpr void decided(bool) noexcept {}
  static constexpr void finished() noexcept {}
  static constexpr void gathered() noexcept {}
  static constexpr void consume() noexcept {}
  static constexpr bool unsettled() noexcept { return false; }
  static constexpr bool in_shares() noexcept { return false; }
  static constexpr bool claims() noexcept { return false; }
  static constexpr bool sharded() noexcept { return false; }
  static constexpr bool readable() noexcept { return true; }
};

}  // namespace strata::detail

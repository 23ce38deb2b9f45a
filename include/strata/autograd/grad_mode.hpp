/// \file
/// Whether operations are recorded for differentiation on this thread, and the RAII guard
/// that turns recording off (evaluation, optimizer updates, metrics).
#pragma once

namespace strata {

/// Per-thread switch for gradient recording.
class GradMode {
 public:
  static bool enabled() noexcept { return flag(); }
  static void set_enabled(bool on) noexcept { flag() = on; }

 private:
  static bool& flag() noexcept {
    thread_local bool on = true;
    return on;
  }
};

/// Disables recording on this thread for the guard's lifetime.
///
/// @code
/// { strata::NoGradGuard no_grad; auto logits = model(x_test); }  // nothing recorded
/// @endcode
class NoGradGuard {
 public:
  NoGradGuard() noexcept : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace strata

/// \file
/// ps::Backoff: how a parameter-server rank waits. MPI moves a large message in fragments
/// only while both sides are inside MPI calls, so for a short window after anything happened
/// (a message arrived, replies were posted) a rank keeps polling, yielding the core between
/// polls; past the window it sleeps, 5 µs doubling to 100 µs, so a rank that waits for
/// others' compute leaves the cores to them (a reply then waits at most 100 µs to be seen).
/// The window grows with the bytes a rank expects to move (1 ms per MB: shared-memory MPI
/// moves several GB/s), so a large transfer is never left to crawl between sleeps.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>

namespace strata::ps {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kActiveWindow{2000};

  /// `window`: how long to keep polling after activity (zero for a transport that moves data
  /// on its own threads, where sleeping stalls nothing).
  explicit Backoff(std::size_t bytes_in_flight = 0, std::chrono::microseconds window = kActiveWindow) : window_(window) {
    active(bytes_in_flight);
  }

  /// Waits a little; true about every 64th poll and after every sleep (a moment to check a
  /// deadline).
  bool pause() {
    // While active, the clock is read every 64th poll only.
    if (active_ && (++polls_ & 63) != 0) {
      std::this_thread::yield();
      return false;
    }
    active_ = Clock::now() < active_until_;
    if (active_) {
      std::this_thread::yield();
      return true;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(100));
    return true;
  }
  /// Something happened: poll actively again for the window (longer by `bytes` to move).
  void active(std::size_t bytes = 0) {
    active_ = window_.count() > 0;
    if (active_) active_until_ = Clock::now() + window_ + std::chrono::microseconds(bytes / 1000);
    sleep_ = std::chrono::microseconds(5);
  }

 private:
  std::chrono::microseconds window_;
  Clock::time_point active_until_{};
  std::chrono::microseconds sleep_{5};
  unsigned polls_ = 0;
  bool active_ = true;
};

}  // namespace strata::ps

/// \file
/// Progress: the chief's progress line — epoch, step, loss, examples/s and the time left.
/// On a terminal it is redrawn in place (five times a second at most); when the output is a
/// file or a pipe (logs, CI) it is a plain line every few seconds and at each epoch's end.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace strata::observe {

class Progress {
 public:
  /// `on`: whether this process reports (the chief's, typically).
  explicit Progress(bool on, std::chrono::milliseconds line_every = std::chrono::seconds(5))
      : on_(on), tty_(on && ::isatty(::fileno(stdout))), line_every_(line_every) {}

  void update(int epoch, int epochs, std::int64_t step, std::int64_t steps, double loss, double examples_per_s,
              double eta_s) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = step == steps;
    if (!last && now - last_ < (tty_ ? std::chrono::milliseconds(200) : line_every_)) return;
    last_ = now;
    const int eta = eta_s > 0 ? static_cast<int>(eta_s) : 0;
    std::printf("%sepoch %d/%d  step %lld/%lld  loss %.4f  %.0f examples/s  ETA %02d:%02d%s%s%s", tty_ ? "\r" : "", epoch,
                epochs, static_cast<long long>(step), static_cast<long long>(steps), loss, examples_per_s, eta / 60,
                eta % 60, note_.empty() ? "" : "  ", note_.c_str(), tty_ ? "   " : "\n");
    drawn_ = tty_ && !last;
    if (tty_ && last) std::printf("\n");
    std::fflush(stdout);
  }

  /// Prints `text` as a line of its own (on a terminal, below the line being redrawn, which
  /// the next update draws again).
  void message(const std::string& text) {
    if (!on_) return;
    end_line();
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

  /// Ends the line being redrawn on a terminal, if any, so that what is printed next starts a
  /// line of its own (a program's closing output).
  void end_line() {
    if (!drawn_) return;
    std::printf("\n");
    std::fflush(stdout);
    drawn_ = false;
  }

  /// Text the line carries from now on (e.g. the straggler scores' "slowest: rank 2, 1.8x the
  /// others' median (...)"); "" for none.
  void set_note(std::string note) { note_ = std::move(note); }

 private:
  std::string note_;
  bool on_, tty_;
  bool drawn_ = false;  // a terminal's line is drawn and not ended
  std::chrono::milliseconds line_every_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace strata::observe

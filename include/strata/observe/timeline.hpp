/// \file
/// Timeline: a record of what each thread of each rank did when — forward, backward, each
/// gradient bucket's all-reduce, the optimizer, data waits — written as Chrome trace JSON
/// (chrome://tracing, https://ui.perfetto.dev), Horovod's timeline. Off until start(): then
/// each event is two clock reads and an append to its thread's own buffer (no lock); write()
/// saves this process's events, merge() joins the ranks' files into one. Timestamps are the
/// steady clock, which processes on one host share; across hosts, set_clock_offset puts a
/// rank on the chief's clock (strata::write_job_timeline does, and gathers the ranks' events
/// through the strategy, so no shared file system is needed).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <strata/support/check.hpp>

namespace strata::observe {

/// One finished span, or a counter's value at an instant (begin_ns == end_ns, category null):
/// its name and category are string literals (never copied).
struct TimelineEvent {
  const char* name;
  const char* category;
  std::int64_t begin_ns, end_ns;
  std::int64_t arg = -1;  ///< e.g. a bucket's index; -1 for none
  std::int64_t bytes = -1;
  double value = 0;  ///< a counter's value
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  static Timeline& instance() {
    static Timeline t;
    return t;
  }

  /// Starts recording; this process's events carry `rank` (the trace's process id).
  void start(int rank) {
    rank_ = rank;
    enabled_.store(true, std::memory_order_release);
  }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  /// Adds a finished span on the calling thread.
  void record(const char* name, const char* category, Clock::time_point begin, Clock::time_point end,
              std::int64_t arg = -1, std::int64_t bytes = -1) {
    if (!enabled()) return;
    thread_buffer().events.push_back({name, category, begin.time_since_epoch().count(),
                                      end.time_since_epoch().count(), arg, bytes});
  }

  /// Sets the counter `name` (a string literal) to `value` at `at`: Perfetto draws each counter
  /// of a rank as a graph on the rank's own track (e.g. its compute ms a step).
  void counter(const char* name, Clock::time_point at, double value) {
    if (!enabled()) return;
    const std::int64_t t = at.time_since_epoch().count();
    thread_buffer().events.push_back({name, nullptr, t, t, -1, -1, value});
  }

  /// Shifts every timestamp this process writes by `ns`: set to the chief's clock minus this
  /// process's (strata::chief_clock_offset), the ranks of a job on several hosts share one
  /// time axis.
  void set_clock_offset(std::int64_t ns) noexcept { offset_ns_ = ns; }
  std::int64_t clock_offset() const noexcept { return offset_ns_; }

  /// This process's events as Chrome trace JSON objects, one per line, each line ending in
  /// ",\n": the body of a trace, to be joined with other ranks' (strata::write_job_timeline).
  std::string event_lines() {
    std::string out;
    std::lock_guard<std::mutex> lock(mutex_);
    auto line = [&](const std::string& s) { out += s + ",\n"; };
    line("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) + ",\"args\":{\"name\":\"rank " +
         std::to_string(rank_) + "\"}}");
    for (const auto& b : buffers_) {
      line("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" +
           std::to_string(b->tid) + ",\"args\":{\"name\":\"" + b->label + "\"}}");
      for (const TimelineEvent& e : b->events) {
        char buf[384];
        if (e.category == nullptr) {  // a counter
          const int n = std::snprintf(buf, sizeof buf, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,"
                                      "\"args\":{\"value\":%.6g}}",
                                      e.name, rank_, static_cast<double>(e.begin_ns + offset_ns_) / 1e3, e.value);
          line(std::string(buf, static_cast<std::size_t>(n)));
          continue;
        }
        const int n = std::snprintf(buf, sizeof buf,
                                    "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                                    "\"dur\":%.3f",
                                    e.name, e.category, rank_, b->tid, static_cast<double>(e.begin_ns + offset_ns_) / 1e3,
                                    static_cast<double>(e.end_ns - e.begin_ns) / 1e3);
        std::string s(buf, static_cast<std::size_t>(n));
        if (e.arg >= 0 || e.bytes >= 0) {
          s += ",\"args\":{";
          if (e.arg >= 0) s += "\"index\":" + std::to_string(e.arg);
          if (e.bytes >= 0) s += std::string(e.arg >= 0 ? "," : "") + "\"bytes\":" + std::to_string(e.bytes);
          s += "}";
        }
        line(s + "}");
      }
    }
    return out;
  }

  /// Writes a Chrome trace whose body is `lines` (event_lines() of one or more ranks).
  static void write_trace(const std::string& path, std::string_view lines) {
    std::ofstream out(path, std::ios::trunc);
    STRATA_REQUIRE(out.good(), invalid_argument, "strata.observe.timeline", "cannot write ", path);
    if (lines.size() >= 2 && lines.substr(lines.size() - 2) == ",\n") lines.remove_suffix(2);
    out << "{\"traceEvents\":[\n" << lines << "\n]}\n";
    STRATA_REQUIRE(out.good(), invalid_argument, "strata.observe.timeline", "writing ", path, " failed");
  }

  /// Writes this process's events to `path` as Chrome trace JSON (one event per line).
  void write(const std::string& path) { write_trace(path, event_lines()); }

  /// Joins the traces in `inputs` (written by write(), one per rank) into `output`.
  static void merge(const std::vector<std::string>& inputs, const std::string& output) {
    std::ofstream out(output, std::ios::trunc);
    STRATA_REQUIRE(out.good(), invalid_argument, "strata.observe.timeline", "cannot write ", output);
    out << "{\"traceEvents\":[\n";
    bool first = true;
    for (const std::string& path : inputs) {
      std::ifstream in(path);
      STRATA_REQUIRE(in.good(), invalid_argument, "strata.observe.timeline", "cannot read ", path);
      for (std::string l; std::getline(in, l);) {
        if (l.empty() || l[0] != '{' || l.rfind("{\"traceEvents\"", 0) == 0) continue;  // the header
        if (l.back() == ',') l.pop_back();
        out << (first ? "" : ",\n") << l;
        first = false;
      }
    }
    out << "\n]}\n";
    STRATA_REQUIRE(out.good(), invalid_argument, "strata.observe.timeline", "writing ", output, " failed");
  }

  /// Names the calling thread in the trace (e.g. "replica 1", "communication").
  void name_thread(const std::string& label) {
    if (enabled()) thread_buffer().label = label;
  }

 private:
  struct ThreadBuffer {
    int tid = 0;
    std::string label;
    std::vector<TimelineEvent> events;
  };
  ThreadBuffer& thread_buffer() {
    thread_local ThreadBuffer* mine = nullptr;
    if (!mine) {
      std::lock_guard<std::mutex> lock(mutex_);
      buffers_.push_back(std::make_unique<ThreadBuffer>());
      mine = buffers_.back().get();
      mine->tid = static_cast<int>(buffers_.size());
      mine->label = "thread " + std::to_string(mine->tid);
      mine->events.reserve(1 << 16);  // appends do not allocate for a long while
    }
    return *mine;
  }

  std::atomic<bool> enabled_{false};
  int rank_ = 0;
  std::int64_t offset_ns_ = 0;
  std::mutex mutex_;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
};

/// Records the enclosing scope as one span when the timeline is on; costs a relaxed load
/// when it is off.
class ScopedEvent {
 public:
  ScopedEvent(const char* name, const char* category, std::int64_t arg = -1, std::int64_t bytes = -1) noexcept
      : name_(name), category_(category), arg_(arg), bytes_(bytes), on_(Timeline::instance().enabled()) {
    if (on_) begin_ = Timeline::Clock::now();
  }
  ~ScopedEvent() {
    if (on_) Timeline::instance().record(name_, category_, begin_, Timeline::Clock::now(), arg_, bytes_);
  }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;

 private:
  const char* name_;
  const char* category_;
  std::int64_t arg_, bytes_;
  bool on_;
  Timeline::Clock::time_point begin_{};
};

}  // namespace strata::observe

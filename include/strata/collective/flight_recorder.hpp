/// \file
/// FlightRecorder: this process's last collectives, kept in a fixed ring at a few stores each
/// and written to one file per rank when the job goes wrong, so that `strata-info --diagnose
/// DIR` can say which collective a rank never entered and what the others were doing
/// (collective/flight_diagnosis.hpp; docs/faults.md, "The flight recorder").
///
/// One recorder per process, on by default (STRATA_FLIGHT_RECORDER_ENTRIES=0 turns it off).
/// Every collective policy records each blocking call it makes on the wire or through shared
/// memory: its group, sequence number, operation, dtype, element count, root, a label (the
/// gradient bucket it reduces), and when it started and ended. A rank's file is written:
///   - on a collective's timeout or abort, before the job ends (the policies call dump());
///   - on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM: what mpirun sends
///     a rank when another aborts), where no handler of the program's own is installed;
///   - on demand: SIGUSR2, from outside the job (`kill -USR2 PID`), and dump() from code.
/// The file is written with write(2) and formatted here, so a signal handler may write it.
/// Where: STRATA_FLIGHT_RECORDER_DIR, or set_directory() in code, else
/// `<temp>/strata-flight-<parent pid>` (one directory for the ranks a launcher started on a host);
/// the file is `rank<R>.flight`, made whole by a rename.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include <strata/collective/options.hpp>  // Fingerprint, OpKind
#include <strata/support/environment.hpp>
#include <strata/support/source_site.hpp>

namespace strata::collective {

/// What a recorded collective was doing when the file was written.
enum class FlightState : std::uint8_t { started = 1, completed = 2, failed = 3 };

inline const char* name_of(FlightState s) noexcept {
  switch (s) {
    case FlightState::started: return "started";
    case FlightState::completed: return "completed";
    case FlightState::failed: return "failed";
  }
  return "?";
}

class FlightRecorder {
 public:
  static constexpr std::size_t kDefaultEntries = 4096;
  static constexpr std::size_t kLabelBytes = 32;

  /// The process's recorder, made on first use with STRATA_FLIGHT_RECORDER_ENTRIES entries and
  /// the signal handlers installed. Never destroyed: a late signal may read it.
  static FlightRecorder& instance() {
    static FlightRecorder* r = [] {
      auto* f = new FlightRecorder(entries_from_env());
      f->install_signal_handlers();
      return f;
    }();
    return *r;
  }
  /// A recorder of `capacity` entries of its own (tests, tools); the policies record into
  /// instance().
  explicit FlightRecorder(std::size_t capacity)
      : capacity_(capacity), entries_(capacity ? std::make_unique<Entry[]>(capacity) : nullptr) {
    if (const char* d = environment::get("STRATA_FLIGHT_RECORDER_DIR")) std::snprintf(dir_, sizeof dir_, "%s", d);
  }
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  std::size_t capacity() const noexcept { return capacity_; }
  bool enabled() const noexcept { return capacity_ > 0; }

  /// This process's rank and the job's size, as the first communicator made here knows them.
  void set_rank(int rank, int size) noexcept {
    int unset = -1;
    if (rank_.compare_exchange_strong(unset, rank)) size_.store(size);
    path_ready_.store(false);
  }
  int rank() const noexcept { return rank_.load(); }

  /// The directory dumps go to (made when the first dump is written). Over
  /// STRATA_FLIGHT_RECORDER_DIR, which sets the default.
  void set_directory(const std::string& dir) {
    std::snprintf(dir_, sizeof dir_, "%s", dir.c_str());
    path_ready_.store(false);
  }
  std::string directory() {
    prepare_path();
    return dir_;
  }
  /// This rank's dump file.
  std::string path() {
    prepare_path();
    return path_;
  }

  /// Names a communicator of policy `kind` in which this process is `rank` of `size` as a group;
  /// its collectives are recorded under the returned id. The first one made names this process
  /// (its rank in the file's name) and fixes the file's path. Every rank makes its
  /// communicators in the same order, so a group's id is the same on every rank.
  int group(const char* kind, int rank, int size) {
    const int g = groups_.fetch_add(1);
    if (g < kGroups) {
      Group& gr = groups_of_[g];
      std::snprintf(gr.kind, sizeof gr.kind, "%s", kind);
      gr.rank = rank;
      gr.size = size;
    }
    if (g == 0) {
      set_rank(rank, size);
      prepare_path();
    }
    return g;
  }

  /// A collective starting on this thread: returns its ticket for finish() (0 when off).
  std::uint64_t start(int group, const Fingerprint& fp) noexcept {
    if (capacity_ == 0) return 0;
    const std::uint64_t t = next_.fetch_add(1, std::memory_order_relaxed) + 1;
    Entry& e = entries_[slot(t)];
    e.ticket.store(0, std::memory_order_relaxed);  // readers skip it while it is rewritten
    std::atomic_thread_fence(std::memory_order_release);
    e.seq = fp.seq;
    e.count = fp.count;
    e.group = group;
    e.root = fp.root;
    e.kind = static_cast<std::uint8_t>(fp.kind);
    e.op = static_cast<std::uint8_t>(fp.op);
    e.dtype = static_cast<std::uint8_t>(fp.dtype);
    std::memcpy(e.label, label_buffer(), kLabelBytes);
    e.start_ns.store(now_ns(), std::memory_order_relaxed);
    e.end_ns.store(0, std::memory_order_relaxed);
    e.state.store(static_cast<std::uint8_t>(FlightState::started), std::memory_order_relaxed);
    e.ticket.store(t, std::memory_order_release);
    return t;
  }
  /// The collective of `ticket` ended (`ok`: completed; else failed).
  void finish(std::uint64_t ticket, bool ok = true) noexcept {
    if (ticket == 0) return;
    Entry& e = entries_[slot(ticket)];
    if (e.ticket.load(std::memory_order_acquire) != ticket) return;  // overwritten since: the ring wrapped
    e.end_ns.store(now_ns(), std::memory_order_relaxed);
    e.state.store(static_cast<std::uint8_t>(ok ? FlightState::completed : FlightState::failed), std::memory_order_release);
  }

  /// A collective recorded for the scope of its call: failed if the scope ends by an exception.
  class Scope {
   public:
    Scope(int group, const Fingerprint& fp) noexcept
        : ticket_(instance().start(group, fp)), exceptions_(std::uncaught_exceptions()) {}
    ~Scope() { instance().finish(ticket_, std::uncaught_exceptions() == exceptions_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::uint64_t ticket_;
    int exceptions_;
  };

  /// Writes this rank's file (whole, by a rename) with `reason`; true if written. Safe in a
  /// signal handler once path() has been called on an ordinary thread (the policies call it
  /// when they are made). A failure's dump (`failure`) is not replaced by a later signal's.
  bool dump(const char* reason, bool failure = true) noexcept {
    if (capacity_ == 0) return false;
    if (!path_ready_.load()) {
      if (in_signal_) return false;
      try {
        prepare_path();
      } catch (...) {
        return false;
      }
    }
    ::mkdir(dir_, 0777);
    char tmp[sizeof path_ + 32];
    Writer w{};
    w.s(path_).s(".tmp.").u(static_cast<std::uint64_t>(::getpid()));
    std::memcpy(tmp, w.buf, w.n + 1 <= sizeof tmp ? w.n + 1 : sizeof tmp);
    tmp[sizeof tmp - 1] = '\0';
    const int fd = ::open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    write_to(fd, reason);
    ::close(fd);
    if (::rename(tmp, path_) != 0) return false;
    if (failure) failed_dump_.store(true);
    return true;
  }
  /// Whether a failure's dump has been written.
  bool dumped_failure() const noexcept { return failed_dump_.load(); }

  /// Installs the signal handlers (once; where the program has none of its own).
  void install_signal_handlers() noexcept {
    bool expected = false;
    if (capacity_ == 0 || !handlers_.compare_exchange_strong(expected, true)) return;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGUSR2}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) continue;
      if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL) continue;  // the program's own, or ignored
      if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction != nullptr) continue;
      struct sigaction sa {};
      sa.sa_handler = &FlightRecorder::on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = sig == SIGUSR2 ? SA_RESTART : static_cast<int>(SA_RESETHAND);
      ::sigaction(sig, &sa, nullptr);
    }
  }

  /// This thread's label for the collectives it starts now ("" for none): what the flight
  /// recorder stores with each, and what the desync check names as each rank's call site.
  static const char* current_label() noexcept { return label_buffer(); }

  /// Where the collectives this thread starts were called from, as "file.cpp:line" (the
  /// file's last component, its end where it is long), for the scope of the object; a label already set (an outer call
  /// site, a gradient bucket) is kept: the outermost says most of where a call came from.
  class CallSite {
   public:
    explicit CallSite(SourceSite at = SourceSite::current()) noexcept {
      char* b = label_buffer();
      if (b[0] != '\0') return;
      set_ = true;
      const char* file = at.file;
      if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
      char line[16];  // ":<line>", kept whole: a long file name gives up its start instead
      const int n = std::snprintf(line, sizeof line, ":%u", at.line);
      const std::size_t room = kLabelBytes - 1 - static_cast<std::size_t>(n), len = std::strlen(file);
      const std::size_t keep = std::min(len, room);
      std::memcpy(b, file + (len - keep), keep);
      std::memcpy(b + keep, line, static_cast<std::size_t>(n) + 1);
    }
    ~CallSite() {
      if (set_) label_buffer()[0] = '\0';
    }
    CallSite(const CallSite&) = delete;
    CallSite& operator=(const CallSite&) = delete;

   private:
    bool set_ = false;
  };

  /// Sets this thread's label for the collectives it starts (a gradient bucket's name), for
  /// the scope of the object.
  class Label {
   public:
    Label(const char* what, std::int64_t index) noexcept {
      char* b = label_buffer();
      std::memcpy(saved_, b, kLabelBytes);
      std::snprintf(b, kLabelBytes, "%s %lld", what, static_cast<long long>(index));
    }
    ~Label() { std::memcpy(label_buffer(), saved_, kLabelBytes); }
    Label(const Label&) = delete;
    Label& operator=(const Label&) = delete;

   private:
    char saved_[kLabelBytes];
  };

 private:
  static constexpr int kGroups = 64;
  struct Entry {
    std::atomic<std::uint64_t> ticket{0};  // 0: empty, or being rewritten
    std::uint64_t seq = 0, count = 0;
    std::int32_t group = 0, root = 0;
    std::uint8_t kind = 0, op = 0, dtype = 0;
    std::atomic<std::uint8_t> state{0};
    char label[kLabelBytes] = {};
    std::atomic<std::int64_t> start_ns{0}, end_ns{0};
  };

  static std::size_t entries_from_env() {
    const char* v = environment::get("STRATA_FLIGHT_RECORDER_ENTRIES");
    return v ? static_cast<std::size_t>(environment::to_int("STRATA_FLIGHT_RECORDER_ENTRIES", v, 0, 1 << 22))
             : kDefaultEntries;
  }
  std::size_t slot(std::uint64_t ticket) const noexcept { return static_cast<std::size_t>((ticket - 1) % capacity_); }
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static std::int64_t wall_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  static char* label_buffer() noexcept {
    thread_local char label[kLabelBytes] = {};
    return label;
  }

  // The directory and file name, fixed before any signal handler needs them.
  void prepare_path() {
    if (path_ready_.load()) return;
    if (dir_[0] == '\0') {
      std::error_code ec;
      std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
      if (ec) tmp = "/tmp";
      std::snprintf(dir_, sizeof dir_, "%s/strata-flight-%ld", tmp.c_str(), static_cast<long>(::getppid()));
    }
    const int r = rank_.load();
    std::snprintf(path_, sizeof path_, "%s/rank%d.flight", dir_, r < 0 ? 0 : r);
    path_ready_.store(true);
  }

  // Formats into a fixed buffer: no allocation, nothing a signal handler may not call.
  struct Writer {
    char buf[512];
    std::size_t n = 0;
    Writer& s(const char* x) noexcept {
      while (x && *x && n + 1 < sizeof buf) buf[n++] = *x++;
      buf[n] = '\0';
      return *this;
    }
    Writer& text(const char* x) noexcept {  // one field: tabs and line ends become spaces
      while (x && *x && n + 1 < sizeof buf) {
        const char c = *x++;
        buf[n++] = c == '\t' || c == '\n' || c == '\r' ? ' ' : c;
      }
      buf[n] = '\0';
      return *this;
    }
    Writer& u(std::uint64_t v) noexcept {
      char d[24];
      int k = 0;
      do d[k++] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0);
      while (k > 0 && n + 1 < sizeof buf) buf[n++] = d[--k];
      buf[n] = '\0';
      return *this;
    }
    Writer& i(std::int64_t v) noexcept {
      if (v < 0) {
        s("-");
        return u(static_cast<std::uint64_t>(-(v + 1)) + 1);
      }
      return u(static_cast<std::uint64_t>(v));
    }
    void flush(int fd) noexcept {
      std::size_t at = 0;
      while (at < n) {
        const ssize_t w = ::write(fd, buf + at, n - at);
        if (w <= 0) break;
        at += static_cast<std::size_t>(w);
      }
      n = 0;
      buf[0] = '\0';
    }
  };

  // The file: a header of `key value` lines, then one tab-separated line per collective, oldest
  // first (flight_diagnosis.hpp reads it back).
  void write_to(int fd, const char* reason) noexcept {
    Writer w;
    char host[128] = {};
    ::gethostname(host, sizeof host - 1);
    const std::int64_t now = now_ns();
    w.s("strata-flight-recorder 1\nrank ").i(rank_.load() < 0 ? 0 : rank_.load()).s("\nsize ").i(size_.load());
    w.s("\npid ").u(static_cast<std::uint64_t>(::getpid())).s("\nhost ").text(host).s("\n").flush(fd);
    w.s("reason ").text(reason).s("\n").flush(fd);
    w.s("now_ns ").i(now).s("\nwall_ns ").i(wall_ns()).s("\ncapacity ").u(capacity_);
    const std::uint64_t last = next_.load(std::memory_order_acquire);
    w.s("\nrecorded ").u(last).s("\n").flush(fd);
    const int groups = std::min(groups_.load(), kGroups);
    for (int g = 0; g < groups; ++g)
      w.s("group ").i(g).s(" ").text(groups_of_[g].kind).s(" ").i(groups_of_[g].rank).s(" ").i(groups_of_[g].size).s("\n").flush(fd);
    w.s("entries\tgroup\tseq\top\treduce\tdtype\tcount\troot\tlabel\tstate\tstart_ns\tend_ns\n").flush(fd);
    const std::uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
    for (std::uint64_t t = first; t <= last; ++t) {
      const Entry& e = entries_[slot(t)];
      if (e.ticket.load(std::memory_order_acquire) != t) continue;  // being rewritten, or not yet written
      const auto state = static_cast<FlightState>(e.state.load(std::memory_order_acquire));
      const std::int64_t start = e.start_ns.load(std::memory_order_relaxed), end = e.end_ns.load(std::memory_order_relaxed);
      char label[kLabelBytes + 1] = {};
      std::memcpy(label, e.label, kLabelBytes);
      const Fingerprint fp{static_cast<OpKind>(e.kind), static_cast<ReduceOp>(e.op), static_cast<DType>(e.dtype), e.count,
                           e.root, e.seq};
      w.s("entry\t").i(e.group).s("\t").u(fp.seq).s("\t").s(name_of(fp.kind)).s("\t").s(name_of(fp.op)).s("\t");
      w.s(name_of(fp.dtype)).s("\t").u(fp.count).s("\t").i(fp.root).s("\t").text(label[0] ? label : "-").s("\t");
      w.s(name_of(state)).s("\t").i(start).s("\t").i(end).s("\n");
      if (e.ticket.load(std::memory_order_acquire) != t) {  // rewritten while read: drop the line
        w.n = 0;
        continue;
      }
      w.flush(fd);
    }
  }

  static void on_signal(int sig) {
    FlightRecorder& r = instance();
    const int saved = errno;
    if (sig == SIGUSR2) {
      r.in_signal_ = true;
      r.dump("on demand (SIGUSR2)", false);
      r.in_signal_ = false;
      errno = saved;
      return;
    }
    if (!r.failed_dump_.load() && r.next_.load() > 0) {  // (a process that made no collective has nothing to tell)
      r.in_signal_ = true;
      Writer w;
      w.s("fatal signal ").i(sig).s(" (").s(sig == SIGTERM ? "SIGTERM: the launcher ended the job" : sigabbrev(sig)).s(")");
      r.dump(w.buf);
    }
    // SA_RESETHAND restored the default action: take it now.
    ::raise(sig);
    errno = saved;
  }
  static const char* sigabbrev(int sig) noexcept {
    switch (sig) {
      case SIGSEGV: return "SIGSEGV";
      case SIGBUS: return "SIGBUS";
      case SIGFPE: return "SIGFPE";
      case SIGILL: return "SIGILL";
      case SIGABRT: return "SIGABRT";
      default: return "signal";
    }
  }

  const std::size_t capacity_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<int> rank_{-1}, size_{0}, groups_{0};
  struct Group {
    char kind[16] = {};
    int rank = 0, size = 0;
  };
  Group groups_of_[kGroups];
  char dir_[512] = {};
  char path_[600] = {};
  std::atomic<bool> path_ready_{false}, failed_dump_{false}, handlers_{false};
  volatile bool in_signal_ = false;
};

}  // namespace strata::collective

/// \file
/// The local launcher behind `strata-run -np N [--] program args...` (torchrun/horovodrun for
/// one host): starts N processes with STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK,
/// STRATA_LOCAL_SIZE, STRATA_MASTER_ADDR/PORT and a private STRATA_RENDEZVOUS_DIR; prefixes
/// every output line with "[rank] "; forwards SIGINT/SIGTERM/SIGHUP; and when any rank fails,
/// stops the others (SIGTERM, then SIGKILL after a grace period) and returns the failing
/// rank's status. With --max-restarts N a failed job is started again, every rank, up to N
/// times (torchrun's --max-restarts): a trainer that checkpoints resumes from its last
/// complete checkpoint, each run knowing its restart count from STRATA_RESTART_COUNT. A job
/// stopped by a signal from outside is not restarted. POSIX only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <strata/runtime/process.hpp>  // detail::env_int
#include <strata/runtime/tcp_store.hpp>
#include <strata/support/check.hpp>
#include <strata/support/environment.hpp>
#include <strata/support/crypto.hpp>

namespace strata::runtime {

/// How long the other ranks get, after one fails, to fail on their own before SIGTERM.
inline constexpr std::chrono::milliseconds kReportWindow{1000};

struct LaunchOptions {
  int nproc = 1;
  int port = 0;                                    ///< 0: a free port on 127.0.0.1
  std::string master_addr = "127.0.0.1";
  std::chrono::milliseconds grace{3000};           ///< SIGTERM to SIGKILL
  bool tcp_rendezvous = false;                     ///< a TCP store on the port instead of a directory
  bool keep_going = false;                         ///< a failed rank is reported, the others run on
  int max_restarts = 0;                            ///< times a failed job is started again
  int elastic_min = 0, elastic_max = 0;            ///< --elastic MIN:MAX (0: not elastic)
  std::vector<std::string> command;                ///< program and its arguments
};

namespace detail {

inline volatile sig_atomic_t g_launcher_signal = 0;
extern "C" inline void launcher_on_signal(int sig) { g_launcher_signal = sig; }

/// Fails, naming the port, if `port` on 127.0.0.1 cannot be bound (RELIABILITY D6: port in use).
inline void check_port_free(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  STRATA_CHECK(s >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const int rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int err = errno;
  ::close(s);
  if (rc != 0)
    STRATA_THROW(::strata::invalid_argument, "strata.runtime", "strata-run: --port ", port, " on 127.0.0.1 is not free (",
                 std::strerror(err), "); pick another port, or leave --port out for a free one");
}

/// A port on 127.0.0.1 nobody listens on right now.
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  STRATA_CHECK(s >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    STRATA_THROW(::strata::io_error, "strata.runtime", "cannot find a free port on 127.0.0.1: ", std::strerror(errno));
  }
  ::close(s);
  return ntohs(a.sin_port);
}

/// Writes the complete lines of `buf` to stdout, each prefixed; keeps a trailing partial line.
inline void flush_lines(std::string& buf, const std::string& prefix, bool final) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    std::fwrite(prefix.data(), 1, prefix.size(), stdout);
    std::fwrite(buf.data() + start, 1, nl - start + 1, stdout);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (final && !buf.empty()) {
    std::fwrite(prefix.data(), 1, prefix.size(), stdout);
    std::fwrite(buf.data(), 1, buf.size(), stdout);
    std::fputc('\n', stdout);
    buf.clear();
  }
  std::fflush(stdout);
}

}  // namespace detail

/// How one run of the job ended.
struct RunOutcome {
  int status = 0;            ///< 0, or the first failing rank's exit status (128 + signal)
  bool interrupted = false;  ///< stopped by a signal from outside (not restarted)
};

/// Runs the job once (its `restart`-th run): every rank's environment, output and exit.
inline RunOutcome run_job_once(const LaunchOptions& o, int restart) {
  // A restart's port is a fresh free one (the last run's may linger in TIME_WAIT), unless set.
  if (o.port && restart == 0) detail::check_port_free(o.port);
  const int port = o.port ? o.port : detail::free_port();
  // A file-store rendezvous gets a fresh private directory (mkdtemp: mode 0700, the X's made unique).
  std::string rdv_dir;
  if (!o.tcp_rendezvous) {
    rdv_dir = (std::filesystem::temp_directory_path() / "strata-run-XXXXXX").string();
    STRATA_CHECK(::mkdtemp(rdv_dir.data()) != nullptr, "strata-run: mkdtemp: ", std::strerror(errno));
  }

  // The job token: every connection to the rendezvous proves it holds it (store_protocol.hpp).
  // One given in the environment is passed on; else each run draws a fresh one.
  const char* given = environment::get("STRATA_JOB_TOKEN");
  const std::string token = given && *given ? std::string(given) : support::to_hex(support::random_bytes(32));
  // An elastic job's store, with its membership, is served here: it must outlive every rank.
  std::unique_ptr<tcp_store_detail::Server> store;
  if (o.elastic_max > 0) {
    store_protocol::Credentials creds;
    creds.token = token;
    MembershipOptions m;
    m.min_workers = o.elastic_min;
    m.max_workers = o.elastic_max;
    m.initial_workers = o.nproc;
    store = std::make_unique<tcp_store_detail::Server>(o.master_addr, port, creds, m);
  }

  struct sigaction sa {};
  sa.sa_handler = detail::launcher_on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  std::fflush(stdout);
  std::fflush(stderr);

  struct Rank {
    pid_t pid = -1;
    int fd = -1;
    std::string buf, prefix;
    bool running = true;
    bool reported = false;  // its failure was reported (--keep-going)
    int status = 0;         // waitpid status once it has exited
  };
  std::vector<Rank> ranks(static_cast<std::size_t>(o.nproc));
  for (int r = 0; r < o.nproc; ++r) {
    int fds[2];
    STRATA_CHECK(::pipe(fds) == 0, "strata-run: pipe: ", std::strerror(errno));
    const pid_t pid = ::fork();
    STRATA_CHECK(pid >= 0, "strata-run: fork: ", std::strerror(errno));
    if (pid == 0) {  // child: output to the pipe, the rank's environment, then the program
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
      ::setenv("STRATA_RANK", std::to_string(r).c_str(), 1);
      ::setenv("STRATA_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      ::setenv("STRATA_LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("STRATA_LOCAL_SIZE", std::to_string(o.nproc).c_str(), 1);
      ::setenv("STRATA_MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("STRATA_MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("STRATA_RESTART_COUNT", std::to_string(restart).c_str(), 1);
      ::setenv("STRATA_JOB_TOKEN", token.c_str(), 1);
      if (o.elastic_max > 0)  // the ranks are the store's clients, rank 0 included
        ::setenv("STRATA_ELASTIC", (std::to_string(o.elastic_min) + ":" + std::to_string(o.elastic_max)).c_str(), 1);
      else
        ::unsetenv("STRATA_ELASTIC");
      if (o.tcp_rendezvous)
        ::unsetenv("STRATA_RENDEZVOUS_DIR");  // rank 0 serves a TCP store on the master port
      else
        ::setenv("STRATA_RENDEZVOUS_DIR", rdv_dir.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "strata-run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      std::fflush(stderr);
      ::_exit(127);
    }
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    auto& rk = ranks[static_cast<std::size_t>(r)];
    rk.pid = pid;
    rk.fd = fds[0];
    rk.prefix = "[" + std::to_string(r) + "] ";
  }

  int status_out = 0;
  bool failing = false, interrupted = false;
  // After a rank fails, the others get a moment to fail on their own and say why (a peer's
  // error names the lost rank), then SIGTERM, then SIGKILL once the grace period is over.
  std::chrono::steady_clock::time_point term_at{}, kill_at{};
  bool termed = false;
  auto stop_all = [&](int sig) {
    for (auto& rk : ranks)
      if (rk.running) ::kill(rk.pid, sig);
  };
  for (;;) {
    // 1. Output.
    std::vector<pollfd> pfds;
    for (auto& rk : ranks)
      if (rk.fd >= 0) pfds.push_back({rk.fd, POLLIN, 0});
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 50);
    else ::usleep(20000);
    for (auto& rk : ranks) {
      if (rk.fd < 0) continue;
      char chunk[65536];
      for (;;) {
        const ssize_t n = ::read(rk.fd, chunk, sizeof chunk);
        if (n > 0) {
          rk.buf.append(chunk, static_cast<std::size_t>(n));
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          detail::flush_lines(rk.buf, rk.prefix, true);
          ::close(rk.fd);
          rk.fd = -1;
        }
        break;
      }
      detail::flush_lines(rk.buf, rk.prefix, false);
    }
    // 2. Signals from outside: pass them on.
    if (const int sig = detail::g_launcher_signal) {
      detail::g_launcher_signal = 0;
      stop_all(sig);
      interrupted = true;
      if (!failing) {
        failing = true;
        termed = true;  // the signal itself was passed on
        status_out = 128 + sig;
        kill_at = std::chrono::steady_clock::now() + o.grace;
      }
    }
    // 3. Exits: the first failure stops the rest. A rank killed by a signal takes its peers
    //    down within microseconds (their sockets reset), so the exits can land in one sweep,
    //    or the peers' a moment before the dead rank is reaped: blame the signalled rank,
    //    the cause, rather than whichever the sweep reaches first.
    auto reap = [&](Rank& rk) {
      if (rk.running && ::waitpid(rk.pid, &rk.status, WNOHANG) == rk.pid) rk.running = false;
      return !rk.running;
    };
    auto failed = [](const Rank& rk) { return !WIFEXITED(rk.status) || WEXITSTATUS(rk.status) != 0; };
    // How much a death says about the cause: a signal from outside (SIGKILL, SIGSEGV, ...)
    // over a SIGPIPE (a write to a dead peer's socket: a consequence) over an exit status.
    auto weight = [](int st) { return WIFSIGNALED(st) ? (WTERMSIG(st) == SIGPIPE ? 1 : 2) : 0; };
    auto pick = [&](int current) {
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const auto& rk = ranks[r];
        if (rk.running || !failed(rk) || rk.reported) continue;
        if (current < 0 || weight(rk.status) > weight(ranks[static_cast<std::size_t>(current)].status))
          current = static_cast<int>(r);
      }
      return current;
    };
    bool any_running = false;
    for (auto& rk : ranks) any_running = !reap(rk) || any_running;
    if (int blamed = failing ? -1 : pick(-1); blamed >= 0) {
      if (weight(ranks[static_cast<std::size_t>(blamed)].status) < 2) {  // a dying rank may be reaped in a moment
        ::usleep(30000);
        for (auto& rk : ranks) reap(rk);
        blamed = pick(blamed);
      }
      auto& rk = ranks[static_cast<std::size_t>(blamed)];
      const bool sig = WIFSIGNALED(rk.status);
      const int status = sig ? 128 + WTERMSIG(rk.status) : WEXITSTATUS(rk.status);
      std::fprintf(stderr, "strata-run: rank %d %s %d; %s\n", blamed, sig ? "was killed by signal" : "exited with status",
                   sig ? WTERMSIG(rk.status) : status,
                   o.elastic_max   ? "the job goes on without it (--elastic)"
                   : o.keep_going ? "the other ranks carry on (--keep-going)"
                                  : "stopping the other ranks");
      std::fflush(stderr);
      if (status_out == 0) status_out = status;
      rk.reported = true;
    }
    // The first failure stops the rest (with --keep-going, each is reported and the job's status
    // is the first one's).
    if (!failing && !o.keep_going && !o.elastic_max && status_out != 0) {
      failing = true;
      term_at = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(o.grace, kReportWindow);
      kill_at = term_at + o.grace;
      any_running = false;
      for (const auto& other : ranks) any_running = any_running || other.running;
    }
    const auto now = std::chrono::steady_clock::now();
    if (failing && any_running && !termed && now >= term_at) {
      stop_all(SIGTERM);
      termed = true;
    }
    if (failing && any_running && now > kill_at) stop_all(SIGKILL);
    bool any_output = false;
    for (auto& rk : ranks) any_output = any_output || rk.fd >= 0;
    if (!any_running && !any_output) break;
  }
  std::error_code ec;
  if (!rdv_dir.empty()) std::filesystem::remove_all(rdv_dir, ec);
  // An elastic job succeeded when its membership never ended and a rank finished its work.
  if (store && !interrupted) {
    bool finished = false;
    for (const auto& rk : ranks) finished = finished || (WIFEXITED(rk.status) && WEXITSTATUS(rk.status) == 0);
    const std::string ended = store->membership_end();
    if (!ended.empty()) {
      std::fprintf(stderr, "strata-run: %s\n", ended.c_str());
      if (status_out == 0) status_out = 1;
    } else if (finished) {
      status_out = 0;
    }
  }
  return {status_out, interrupted};
}

/// Runs the job, and again after a failure up to o.max_restarts times; returns 0 if a run
/// ended with every rank exiting 0, else the last run's first failing status (128 + signal
/// for a rank killed by a signal).
inline int launch_processes(const LaunchOptions& o) {
  STRATA_CHECK(o.nproc >= 1, "strata-run: -np must be at least 1, got ", o.nproc);
  STRATA_CHECK(!o.command.empty(), "strata-run: no program to run (usage: strata-run -np N [--] program args...)");
  STRATA_CHECK(o.port >= 0 && o.port <= 65535, "strata-run: --port ", o.port, " is outside 0..65535");
  STRATA_CHECK(o.max_restarts >= 0, "strata-run: --max-restarts must be at least 0, got ", o.max_restarts);
  STRATA_CHECK(o.max_restarts == 0 || !o.keep_going, "strata-run: --max-restarts restarts every rank when one "
               "fails, --keep-going lets the others run on: choose one");
  if (o.elastic_max > 0) {
    STRATA_CHECK(o.elastic_min >= 1 && o.elastic_min <= o.nproc && o.nproc <= o.elastic_max, "strata-run: --elastic ",
                 o.elastic_min, ":", o.elastic_max, " must satisfy 1 <= MIN <= -np (", o.nproc, ") <= MAX");
    STRATA_CHECK(o.tcp_rendezvous, "strata-run: --elastic meets through the TCP store that strata-run serves, not a "
                 "rendezvous directory (drop --rendezvous file)");
    STRATA_CHECK(o.max_restarts == 0, "strata-run: --elastic goes on without a lost rank, --max-restarts restarts "
                 "every rank: choose one");
  }
  for (int restart = 0;; ++restart) {
    const RunOutcome run = run_job_once(o, restart);
    if (run.status == 0) {
      if (restart > 0) std::fprintf(stderr, "strata-run: the job finished after %d restart%s\n", restart,
                                    restart == 1 ? "" : "s");
      return 0;
    }
    if (run.interrupted || restart >= o.max_restarts) {
      if (o.max_restarts > 0 && !run.interrupted)
        std::fprintf(stderr, "strata-run: the job failed after %d restart%s (--max-restarts %d)\n", restart,
                     restart == 1 ? "" : "s", o.max_restarts);
      return run.status;
    }
    std::fprintf(stderr, "strata-run: restarting every rank (restart %d of at most %d)\n", restart + 1,
                 o.max_restarts);
    std::fflush(stderr);
  }
}

/// Parses `strata-run` arguments: -np N (or --nproc N), --port P, --rendezvous file|tcp,
/// --grace SECONDS, --keep-going, --max-restarts N, --elastic MIN:MAX, [--] command...
inline LaunchOptions parse_launch_args(int argc, char** argv) {
  LaunchOptions o;
  bool have_np = false, elastic_rendezvous = false, file_rendezvous = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      STRATA_CHECK(i + 1 < argc, "strata-run: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "-np" || a == "-n" || a == "--nproc") {
      o.nproc = static_cast<int>(detail::env_int("-np", value(), 1, 4096));
      have_np = true;
    } else if (a == "--port") {
      o.port = static_cast<int>(detail::env_int("--port", value(), 1, 65535));
    } else if (a == "--rendezvous") {
      const std::string kind = value();
      STRATA_CHECK(kind == "file" || kind == "tcp", "strata-run: --rendezvous ", kind, " is not file or tcp");
      o.tcp_rendezvous = kind == "tcp";
      file_rendezvous = kind == "file";
    } else if (a == "--keep-going") {
      o.keep_going = true;
    } else if (a == "--max-restarts") {
      o.max_restarts = static_cast<int>(detail::env_int("--max-restarts", value(), 0, 1000));
    } else if (a == "--elastic") {
      const std::string v = value();
      const auto colon = v.find(':');
      STRATA_CHECK(colon != std::string::npos, "strata-run: --elastic ", v, " is not MIN:MAX");
      o.elastic_min = static_cast<int>(detail::env_int("--elastic MIN", v.substr(0, colon).c_str(), 1, 4096));
      o.elastic_max = static_cast<int>(detail::env_int("--elastic MAX", v.substr(colon + 1).c_str(), 1, 4096));
      o.tcp_rendezvous = true;
      elastic_rendezvous = true;
    } else if (a == "--grace") {
      o.grace = std::chrono::milliseconds(detail::env_int("--grace", value(), 0, 3600) * 1000);
    } else if (a == "--") {
      ++i;
      break;
    } else if (!a.empty() && a[0] == '-') {
      STRATA_THROW(::strata::invalid_argument, "strata.runtime", "strata-run: unknown option '", a,
                   "' (usage: strata-run -np N [--port P] [--rendezvous file|tcp] [--grace S] [--keep-going] "
                   "[--max-restarts N] [--elastic MIN:MAX] [--] program args...)");
    } else {
      break;
    }
  }
  STRATA_CHECK(have_np, "strata-run: -np N is required (usage: strata-run -np N [--] program args...)");
  if (elastic_rendezvous && file_rendezvous) o.tcp_rendezvous = false;  // refused, by name, in launch_processes
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  STRATA_CHECK(!o.command.empty(), "strata-run: no program to run (usage: strata-run -np N [--] program args...)");
  return o;
}

}  // namespace strata::runtime

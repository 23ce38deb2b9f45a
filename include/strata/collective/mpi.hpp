/// \file
/// collective::Mpi — the ranks are MPI processes (Open MPI or any MPI-3 library), launched by
/// mpirun. The blocking collectives are the library's own (MPI_Allreduce, MPI_Bcast, ...), so
/// they cost what raw MPI costs; a watchdog thread enforces the deadline: a collective that
/// has not completed in time prints which collective, its sequence number and rank, and
/// aborts the job through MPI_Abort, so mpirun exits non-zero instead of hanging. A rank that
/// dies makes mpirun abort the job (MPI_ERRORS_ARE_FATAL).
///
/// Half and BFloat16 are reduced through a float32 copy (accumulated in float32, rounded once).
///
/// Where every rank runs on one host, an all-reduce of a shared buffer (shared_buffer) reduces
/// across the ranks' copies, and allgather and reduce_scatter of 64 KiB or more go through a
/// staging region per rank in shared memory (detail::HostSharedBuffers); `STRATA_SHM=0` keeps
/// every collective on MPI's own.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_MPI
#error "strata::collective::Mpi needs MPI: configure strata with -Dmpi=enabled (Debian: libopenmpi-dev openmpi-bin), or by hand: mpicxx (or -lmpi) and -DSTRATA_HAS_MPI=1"
#else  // the rest only where the build has it: the #error above is then the only message

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/collective/detail/host_shared_buffer.hpp>
#include <strata/collective/detail/reduce.hpp>
#include <strata/collective/detail/wait_policy.hpp>  // WaitTimer
#include <strata/collective/flight_recorder.hpp>
#include <strata/collective/options.hpp>
#include <strata/collective/typed_front_end.hpp>
#include <strata/runtime/fail_job.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/support/error.hpp>

namespace strata::collective {

namespace detail {

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; reductions go through float32
  }
  return MPI_BYTE;
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Prod: return MPI_PROD;
  }
  return MPI_SUM;
}

inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  STRATA_THROW(collective_error, "strata.collective.mpi", what, ": ", std::string(msg, static_cast<std::size_t>(len)));
}

/// Frees `comm` (a communicator this code created) unless MPI is already finalised (a static
/// destroyed after the atexit MPI_Finalize).
inline void free_communicator(MPI_Comm& comm) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

/// Aborts the job when a collective outlives its deadline. One per process. Arming and
/// disarming are two atomic stores (no lock, no wake-up on the collective's path); the
/// watchdog thread polls a few times per deadline.
///
/// The census names who is missing. The thread also answers, each time it wakes, any peer's
/// question "are you waiting in a collective?" (a one-word message on a communicator of its
/// own). When a deadline passes, this process asks every other one and waits a few periods:
/// a peer that answers "no" is running but never called the collective (it skipped it, or is
/// busy elsewhere); one that does not answer is stopped, gone, or stuck outside MPI.
class MpiWatchdog {
 public:
  static MpiWatchdog& instance() {
    static MpiWatchdog w;
    return w;
  }
  /// A peer's answer to the census, by world rank.
  enum Census : int { kNoAnswer = -1, kNotInCollective = 0, kInCollective = 1 };
  using Describe = std::string (*)(const void*, const std::vector<int>& census);

  /// Starts the thread with its census communicator (a duplicate of MPI_COMM_WORLD; called by
  /// every process, right after MPI_Init).
  void attach(MPI_Comm census, std::chrono::milliseconds timeout) {
    census_ = census;
    if (!thread_.joinable()) start(timeout);
  }
  /// Marks the start of a blocking call with its deadline; on expiry describe(ctx, census) is
  /// printed (it runs only then: the call is stuck, so what it reads is stable).
  void arm(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout, Describe describe,
           const void* ctx) {
    if (!thread_.joinable()) start(timeout);
    describe_.store(describe, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    deadline_ns_.store(deadline.time_since_epoch().count(), std::memory_order_release);
  }
  void disarm() { deadline_ns_.store(0, std::memory_order_release); }
  ~MpiWatchdog() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    free_communicator(census_);
  }

 private:
  static constexpr int kAsk = 1, kAnswer = 2;

  void start(std::chrono::milliseconds timeout) {
    period_ = std::clamp(timeout / 8, std::chrono::milliseconds(1), std::chrono::milliseconds(200));
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        std::this_thread::sleep_for(period_);
        answer_questions();
        const auto d = deadline_ns_.load(std::memory_order_acquire);
        if (d != 0 && std::chrono::steady_clock::now().time_since_epoch().count() > d) {
          const Describe describe = describe_.load(std::memory_order_relaxed);
          // The flight record first: a peer whose census ends sooner aborts the job under this one.
          if (describe) FlightRecorder::instance().dump(describe(ctx_.load(std::memory_order_relaxed), {}).c_str());
          const std::vector<int> census = take_census();
          const std::string what = describe ? describe(ctx_.load(std::memory_order_relaxed), census) : "MPI collective";
          FlightRecorder::instance().dump(what.c_str());
          std::fprintf(stderr, "%s\n", what.c_str());
          std::fflush(stderr);
          MPI_Abort(MPI_COMM_WORLD, 124);
        }
      }
    });
  }

  /// Answers every question waiting: 1 if this process is inside a blocking collective.
  void answer_questions() {
    if (census_ == MPI_COMM_NULL) return;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kAsk, census_, &flag, &st);
      if (!flag) return;
      std::uint64_t q = 0;
      MPI_Recv(&q, 1, MPI_UINT64_T, st.MPI_SOURCE, kAsk, census_, MPI_STATUS_IGNORE);
      const std::uint64_t a = deadline_ns_.load(std::memory_order_acquire) != 0 ? 1 : 0;
      MPI_Send(&a, 1, MPI_UINT64_T, st.MPI_SOURCE, kAnswer, census_);  // one word: sent eagerly
      // A peer's collective timed out and its abort may end this process before any signal
      // reaches it: write the flight record now, once.
      FlightRecorder& recorder = FlightRecorder::instance();
      if (!recorder.dumped_failure())
        recorder.dump(("world rank " + std::to_string(st.MPI_SOURCE) + " asked where this rank is: a collective of " +
                       "its timed out")
                          .c_str());
    }
  }

  /// Every world rank's answer (this one's: in a collective), within a few periods.
  std::vector<int> take_census() {
    int me = 0, n = 0;
    if (census_ == MPI_COMM_NULL) return {};
    MPI_Comm_rank(census_, &me);
    MPI_Comm_size(census_, &n);
    std::vector<int> out(static_cast<std::size_t>(n), kNoAnswer);
    out[static_cast<std::size_t>(me)] = kInCollective;
    const std::uint64_t q = 0;
    for (int r = 0; r < n; ++r)
      if (r != me) MPI_Send(&q, 1, MPI_UINT64_T, r, kAsk, census_);
    const auto until = std::chrono::steady_clock::now() + 4 * period_ + std::chrono::milliseconds(100);
    int heard = 1;
    while (heard < n && std::chrono::steady_clock::now() < until) {
      answer_questions();  // the others take their census too
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kAnswer, census_, &flag, &st);
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      std::uint64_t a = 0;
      MPI_Recv(&a, 1, MPI_UINT64_T, st.MPI_SOURCE, kAnswer, census_, MPI_STATUS_IGNORE);
      if (out[static_cast<std::size_t>(st.MPI_SOURCE)] == kNoAnswer) ++heard;
      out[static_cast<std::size_t>(st.MPI_SOURCE)] = a ? kInCollective : kNotInCollective;
    }
    return out;
  }

  std::atomic<std::chrono::steady_clock::rep> deadline_ns_{0};
  std::atomic<Describe> describe_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<bool> stop_{false};
  std::chrono::milliseconds period_{200};
  MPI_Comm census_ = MPI_COMM_NULL;
  std::thread thread_;
};

}  // namespace detail

/// A rank of an MPI communicator.
class Mpi : public TypedFrontEnd<Mpi> {
 public:
  static constexpr const char* name = "mpi";

  /// Initialises MPI (once per process, with MPI_THREAD_MULTIPLE: the watchdog may abort from
  /// its own thread) and finalises it at exit. Safe to call when MPI is already initialised.
  static void initialize() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return;
    int provided = 0;
    detail::mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE)
      STRATA_THROW(collective_error, "strata.collective.mpi", "this MPI library provides thread level ", provided,
                   ", strata needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    });
    // A process that fails ends the job now (runtime::fail_job), not at the others' deadlines.
    runtime::job_abort_hook().store(+[](const std::string& reason) {
      int size = 1, rank = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      if (size < 2) return;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      FlightRecorder::instance().dump(reason.c_str());
      std::fprintf(stderr, "[strata.collective.aborted] rank %d failed, ending the job: %s\n", rank, reason.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    });
    // After the atexit above, so the watchdog (a static made below) is gone before MPI_Finalize.
    MPI_Comm census = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &census), "MPI_Comm_dup");
    detail::MpiWatchdog::instance().attach(census, Options::from_env().timeout);
  }

  explicit Mpi(MPI_Comm comm = MPI_COMM_WORLD, Options o = Options::from_env()) : options_(o) {
    initialize();
    detail::mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Every rank's (host, pid), so a timeout can name a peer on this host that is stopped or gone.
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::uint64_t mine[2] = {std::hash<std::string>{}(host), static_cast<std::uint64_t>(::getpid())};
    peers_.resize(2 * static_cast<std::size_t>(size_));
    detail::mpi_check(MPI_Allgather(mine, 2, MPI_UINT64_T, peers_.data(), 2, MPI_UINT64_T, comm_), "MPI_Allgather");
    flight_group_ = FlightRecorder::instance().group(name, rank_, size_);
  }
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;
  ~Mpi() { detail::free_communicator(comm_); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm comm() const noexcept { return comm_; }
  std::uint64_t sequence() const noexcept { return seq_; }
  /// Rank r's process state (runtime::process_state) when it runs on this host, '?' otherwise.
  char peer_state(int r) const {
    const auto ur = static_cast<std::size_t>(r), me = static_cast<std::size_t>(rank_);
    if (r < 0 || ur * 2 + 1 >= peers_.size() || peers_[2 * ur] != peers_[2 * me]) return '?';
    return runtime::process_state(static_cast<long>(peers_[2 * ur + 1]));
  }

  // The typed overloads (allreduce, broadcast, allgather, reduce_scatter) come from TypedFrontEnd.
  void broadcast_raw(void* x, std::size_t count, DType dtype, int root) {
    run(Fingerprint{OpKind::broadcast, ReduceOp::Sum, dtype, count, root, 0},
        [&] { return MPI_Bcast(x, count_of(count), detail::mpi_type(dtype), root, comm_); });
  }
  void allgather_raw(const void* in, void* out, std::size_t count, DType dtype) {
    if (auto* staging = staging_for(count * size_of(dtype)))
      return on_host(Fingerprint{OpKind::allgather, ReduceOp::Sum, dtype, count, 0, seq_++}, [&](const std::string& what) {
        staging->allgather(in, out, count * size_of(dtype), options_.timeout, what);
      });
    const MPI_Datatype t = detail::mpi_type(dtype);
    // (in place: `in` is this rank's block of `out`; the staged path copies it out first)
    const bool in_place = in == static_cast<const char*>(out) + count * size_of(dtype) * static_cast<std::size_t>(rank_);
    run(Fingerprint{OpKind::allgather, ReduceOp::Sum, dtype, count, 0, 0}, [&] {
      return MPI_Allgather(in_place ? MPI_IN_PLACE : in, count_of(count), t, out, count_of(count), t, comm_);
    });
  }
  void reduce_scatter_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    if (dtype == DType::f16 || dtype == DType::bf16)  // through float32, like allreduce_raw
      return detail::reduce_scatter_through_float32(in, out, count, dtype, size_, [&](const float* full, float* part) {
        reduce_scatter_raw(full, part, count, DType::f32, op);
      });
    if (auto* staging = staging_for(count * static_cast<std::size_t>(size_) * size_of(dtype)))
      return on_host(Fingerprint{OpKind::reduce_scatter, op, dtype, count, 0, seq_++}, [&](const std::string& what) {
        staging->reduce_scatter(in, out, count, dtype, op, options_.timeout, what);
      });
    run(Fingerprint{OpKind::reduce_scatter, op, dtype, count, 0, 0}, [&] {
      return MPI_Reduce_scatter_block(in, out, count_of(count), detail::mpi_type(dtype), detail::mpi_op(op), comm_);
    });
    if (op == ReduceOp::Mean) divide_by_size(out, count, dtype);
  }
  void barrier() {
    run(Fingerprint{OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0, 0}, [&] { return MPI_Barrier(comm_); });
  }

  /// Handle of a non-blocking MPI collective.
  class Work {
   public:
    Work() = default;
    Work(MPI_Request r, Mpi* owner, Fingerprint fp, std::function<void()> finish)
        : req_(r), owner_(owner), fp_(fp), finish_(std::move(finish)),
          ticket_(FlightRecorder::instance().start(owner->flight_group_, fp)) {}
    /// Completes the collective (polling, so the deadline applies).
    void wait() {
      if (req_ == MPI_REQUEST_NULL) return;
      const detail::WaitTimer waiting;
      const auto deadline = std::chrono::steady_clock::now() + owner_->options_.timeout;
      // Non-blocking collectives progress only inside MPI calls: keep testing. Past a short
      // spin, yield between tests (a sleep would stall the schedule's rounds by its length).
      for (std::uint32_t spins = 0; !test(); ++spins) {
        if (spins > 1000) std::this_thread::yield();
        if ((spins & 255) == 0 && std::chrono::steady_clock::now() > deadline) owner_->die_timeout(fp_);
      }
    }
    bool test() {
      if (req_ == MPI_REQUEST_NULL) return true;
      int flag = 0;
      detail::mpi_check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) FlightRecorder::instance().finish(std::exchange(ticket_, 0));
      if (flag && finish_) std::exchange(finish_, nullptr)();
      return flag != 0;
    }

   private:
    MPI_Request req_ = MPI_REQUEST_NULL;
    Mpi* owner_ = nullptr;
    Fingerprint fp_;
    std::function<void()> finish_;
    std::uint64_t ticket_ = 0;  // its FlightRecorder entry, until complete
  };

  /// Starts an in-place allreduce (MPI_Iallreduce); the buffer stays untouched until wait().
  template <class T>
  Work iallreduce(std::span<T> x, ReduceOp op) {
    static_assert(!std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>,
                  "iallreduce on 16-bit floats: convert to float32 first");
    Fingerprint fp{OpKind::allreduce, op, dtype_v<T>, x.size(), 0, seq_++};
    if (options_.check_fingerprints) check_fingerprint(fp);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, x.data(), count_of(x.size()), detail::mpi_type(dtype_v<T>),
                                     detail::mpi_op(op), comm_, &req),
                      "MPI_Iallreduce");
    std::function<void()> finish;
    if (op == ReduceOp::Mean) finish = [p = x.data(), n = x.size(), s = size_] { detail::divide<T>(n, p, s); };
    return Work(req, this, fp, std::move(finish));
  }

  /// Starts an allgather (MPI_Iallgather; `out`: rank k's `in` at k |in|); neither buffer may
  /// be touched until wait().
  template <class T>
  Work iallgather(std::span<const T> in, std::span<T> out) {
    collective::detail::check_allgather_sizes(in.size(), out.size(), size_);
    Fingerprint fp{OpKind::allgather, ReduceOp::Sum, dtype_v<T>, in.size(), 0, seq_++};
    if (options_.check_fingerprints) check_fingerprint(fp);
    const MPI_Datatype t = detail::mpi_type(dtype_v<T>);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallgather(in.data(), count_of(in.size()), t, out.data(), count_of(in.size()), t, comm_, &req),
                      "MPI_Iallgather");
    return Work(req, this, fp, nullptr);
  }
  /// Starts a reduce-scatter (MPI_Ireduce_scatter_block; `out`: this rank's share).
  template <class T>
  Work ireduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {
    static_assert(!std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>,
                  "ireduce_scatter on 16-bit floats: convert to float32 first");
    collective::detail::check_reduce_scatter_sizes(in.size(), out.size(), size_);
    Fingerprint fp{OpKind::reduce_scatter, op, dtype_v<T>, out.size(), 0, seq_++};
    if (options_.check_fingerprints) check_fingerprint(fp);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Ireduce_scatter_block(in.data(), out.data(), count_of(out.size()), detail::mpi_type(dtype_v<T>),
                                                detail::mpi_op(op), comm_, &req),
                      "MPI_Ireduce_scatter_block");
    std::function<void()> finish;
    if (op == ReduceOp::Mean) finish = [p = out.data(), n = out.size(), s = size_] { detail::divide<T>(n, p, s); };
    return Work(req, this, fp, std::move(finish));
  }

  /// `count` elements of `dtype` in memory that every rank of this group maps, or an undefined
  /// tensor when the ranks span hosts (or STRATA_SHM=0): an in-place allreduce of it reduces
  /// straight across the ranks' copies (detail::HostSharedBuffers). Collective.
  /// `common`: one region that every rank maps, so the tensor is the same memory on every
  /// rank (an in-place all-reduce of it goes through the transport).
  Tensor shared_buffer(std::int64_t count, DType dtype, bool common = false) {
    return shared_.make(*this, count, dtype, common);
  }
  /// Rank `rank`'s copy of `mine`, a tensor in a shared_buffer of this rank (the same place
  /// in that rank's buffer), readable and writable here.
  Tensor shared_peer(const Tensor& mine, int rank) const { return shared_.peer(mine, rank); }
  /// Whether the ranks share this host's memory (more than one rank, all on this host, and
  /// STRATA_SHM not 0), so that large collectives go through it. Collective on its first call.
  bool shares_host() { return staging_for(kStagedBytes) != nullptr; }
  /// A barrier of the group through the shared buffer that holds `mine` (no MPI call): every
  /// rank calls it with its own copy.
  void shared_sync(const Tensor& mine) {
    const Fingerprint fp{OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0, seq_++};
    const FlightRecorder::Scope recorded(flight_group_, fp);
    const detail::WaitTimer waiting;  // the rank waits on the others meanwhile
    try {
      shared_.sync(mine, options_.timeout, fp.str());
    } catch (const std::exception& e) {
      abort(e.what());  // as for MPI's own collectives: a failure ends the job
    }
  }

  /// Aborts the whole job (MPI_Abort): every rank stops, mpirun exits non-zero.
  void abort(const std::string& reason) {
    shared_.abort(reason);
    FlightRecorder& recorder = FlightRecorder::instance();
    recorder.dump(reason.c_str());
    std::fprintf(stderr, "[strata.collective.aborted] rank %d: %s; flight recorder: %s\n", rank_, reason.c_str(),
                 recorder.path().c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
  }

  /// Sums `count` 16-bit floats (`dtype` f16 or bf16) in place with 16 bits per element on
  /// the wire: each partial sum is added in float32 and rounded back (gradient compression;
  /// the plain allreduce of f16/bf16 carries float32 instead and rounds once).
  void allreduce_sum16_raw(void* x, std::size_t count, DType dtype) {
    STRATA_CHECK(dtype == DType::f16 || dtype == DType::bf16, "allreduce_sum16_raw of ", name_of(dtype));
    const Fingerprint fp{OpKind::allreduce, ReduceOp::Sum, dtype, count, 0, 0};
    run(fp, [&] { return MPI_Allreduce(MPI_IN_PLACE, x, count_of(count), MPI_UINT16_T, sum16_op(dtype), comm_); });
  }

  void allreduce_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    if (dtype == DType::f16 || dtype == DType::bf16) {  // accumulate in float32, round once
      std::vector<float> acc(count);
      detail::visit_collective_dtype(dtype, [&](auto s, auto) {
        using S = decltype(s);
        detail::load<S, float>(count, static_cast<const S*>(in), acc.data());
        allreduce_raw(acc.data(), acc.data(), count, DType::f32, op);
        detail::store<float, S>(count, acc.data(), static_cast<S*>(out));
      });
      return;
    }
    if (in == out)
      if (auto* shared = shared_.find(out, count * size_of(dtype)))
        return on_host(Fingerprint{OpKind::allreduce, op, dtype, count, 0, seq_++},
                       [&](const std::string& what) { shared->allreduce(count, dtype, op, options_.timeout, what); });
    const Fingerprint fp{OpKind::allreduce, op, dtype, count, 0, 0};
    const void* send = in == out ? MPI_IN_PLACE : in;
    run(fp, [&] {
      return MPI_Allreduce(send, out, count_of(count), detail::mpi_type(dtype), detail::mpi_op(op), comm_);
    });
    if (op == ReduceOp::Mean) divide_by_size(out, count, dtype);
  }

 private:
  friend class TypedFrontEnd<Mpi>;
  void before_blocking() noexcept {}  // MPI orders this rank's calls itself

  /// Mean's last step on an arithmetic dtype (16-bit floats are divided in float32).
  void divide_by_size(void* out, std::size_t count, DType dtype) {
    detail::visit_collective_dtype(dtype, [&](auto s, auto) {
      using S = decltype(s);
      if constexpr (std::is_arithmetic_v<S>) detail::divide<S>(count, static_cast<S*>(out), size_);
    });
  }

  /// Collectives of at least this many bytes (a rank's whole input) go through the host's
  /// shared memory where every rank runs on this host (bench_collectives_mpi: Open MPI's
  /// shared-memory transport copies each byte through its own segment in fragments).
  static constexpr std::size_t kStagedBytes = std::size_t{64} << 10;
  /// The staging buffer for a collective of `bytes`, or null: below kStagedBytes, or where the
  /// ranks do not share a host. Collective on the first call that reaches it (every rank makes
  /// the buffer in the same call); the calls that make it keep the caller's sequence numbers.
  detail::HostSharedBuffer* staging_for(std::size_t bytes) {
    return bytes < kStagedBytes || size_ == 1 ? nullptr : shared_.staging(*this, seq_);
  }
  /// Runs a collective through shared memory, `what` its name in errors; a failure there
  /// ends the job, as for MPI's own collectives.
  template <class Call>
  void on_host(const Fingerprint& fp, Call&& call) {
    if (options_.check_fingerprints) check_fingerprint(fp);
    const FlightRecorder::Scope recorded(flight_group_, fp);
    const detail::WaitTimer waiting;  // the rank waits on the others meanwhile
    try {
      call(fp.str());
    } catch (const std::exception& e) {
      abort(e.what());
    }
  }

  static int count_of(std::size_t n) {
    STRATA_CHECK(n <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "MPI collectives take at most 2^31-1 "
                 "elements per call, got ", n);
    return static_cast<int>(n);
  }

  template <class Call>
  void run(Fingerprint fp, Call&& call) {
    fp.seq = seq_++;
    if (options_.check_fingerprints) check_fingerprint(fp);
    auto& dog = detail::MpiWatchdog::instance();
    current_ = fp;  // the watchdog's message is built only if it fires
    dog.arm(std::chrono::steady_clock::now() + options_.timeout, options_.timeout,
            [](const void* self, const std::vector<int>& census) {
              auto* m = static_cast<const Mpi*>(self);
              return m->timeout_message(m->current_, census);
            },
            this);
    int rc = MPI_SUCCESS;
    {
      const FlightRecorder::Scope recorded(flight_group_, fp);
      const detail::WaitTimer waiting;  // the rank waits on the others meanwhile
      rc = call();
    }
    dog.disarm();
    detail::mpi_check(rc, name_of(fp.kind));
  }

  /// The deadline's message: which collective, and who did not arrive — from the census
  /// (world ranks' answers, see MpiWatchdog) and, on this host, the peers' process states.
  std::string timeout_message(const Fingerprint& fp, const std::vector<int>& census = {}) const {
    std::ostringstream os;
    os << strata::detail::error_text("strata.collective.timeout") << fp.str() << " on rank " << rank_ << " of " << size_
       << ": not complete within " << std::chrono::duration<double>(options_.timeout).count() << " s (";
    std::vector<int> world(static_cast<std::size_t>(size_), -1);  // this communicator's ranks in MPI_COMM_WORLD
    if (!census.empty()) {
      MPI_Group mine = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
      std::vector<int> ranks(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) ranks[static_cast<std::size_t>(r)] = r;
      MPI_Comm_group(comm_, &mine);
      MPI_Comm_group(MPI_COMM_WORLD, &all);
      MPI_Group_translate_ranks(mine, size_, ranks.data(), all, world.data());
      MPI_Group_free(&mine);
      MPI_Group_free(&all);
    }
    std::string blame;
    auto add = [&](int r, const char* what) { blame += (blame.empty() ? "" : ", ") + ("rank " + std::to_string(r) + what); };
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const char st = peer_state(r);
      const int w = world[static_cast<std::size_t>(r)];
      const int answer = w >= 0 && static_cast<std::size_t>(w) < census.size() ? census[static_cast<std::size_t>(w)]
                                                                               : detail::MpiWatchdog::kInCollective;
      if (runtime::is_stopped(st)) add(r, " is stopped");
      else if (runtime::is_gone(st)) add(r, " is gone");
      else if (answer == detail::MpiWatchdog::kNotInCollective) add(r, " is running but never called it");
      else if (answer == detail::MpiWatchdog::kNoAnswer) add(r, " does not answer (stopped, gone, or stuck outside MPI)");
    }
    os << (!blame.empty()     ? "did not arrive: " + blame
           : census.empty()   ? std::string("the other ranks not asked where they are")
                              : std::string("every rank is waiting in a collective: they called different ones"))
       << "); aborting the job; flight recorder: " << FlightRecorder::instance().path();
    return os.str();
  }
  /// The MPI_Op adding 16-bit floats of `dtype` through float32, created once.
  static MPI_Op sum16_op(DType dtype) {
    static const MPI_Op half = make_sum16_op<Half>(), bf16 = make_sum16_op<BFloat16>();
    return dtype == DType::f16 ? half : bf16;
  }
  template <class S>
  static MPI_Op make_sum16_op() {
    MPI_Op op = MPI_OP_NULL;
    detail::mpi_check(MPI_Op_create(
                          [](void* in, void* inout, int* len, MPI_Datatype*) {
                            detail::add16<S>(static_cast<std::size_t>(*len), static_cast<S*>(inout),
                                             static_cast<const S*>(in));
                          },
                          /*commute=*/1, &op),
                      "MPI_Op_create");
    return op;
  }

  [[noreturn]] void die_timeout(const Fingerprint& fp) {
    const std::string what = timeout_message(fp);
    FlightRecorder::instance().dump(what.c_str());
    std::fprintf(stderr, "%s\n", what.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 124);
    std::abort();
  }

  /// Debug mode: every rank's fingerprint, gathered and compared before the collective runs.
  void check_fingerprint(const Fingerprint& fp) {
    std::uint64_t mine[kCheckWords];
    pack_checked_call(fp, FlightRecorder::current_label(), mine);
    std::vector<std::uint64_t> all(kCheckWords * static_cast<std::size_t>(size_));
    detail::mpi_check(MPI_Allgather(mine, static_cast<int>(kCheckWords), MPI_UINT64_T, all.data(), static_cast<int>(kCheckWords),
                                    MPI_UINT64_T, comm_),
                      "fingerprint check");
    if (auto msg = fingerprint_mismatch(rank_, fp, all.data(), size_); !msg.empty()) throw collective_error(msg);
  }

  Options options_;
  detail::HostSharedBuffers shared_;
  Fingerprint current_;  ///< the blocking call in progress, for the watchdog's message
  std::vector<std::uint64_t> peers_;  ///< (host hash, pid) per rank
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::uint64_t seq_ = 0;
  int flight_group_ = 0;  ///< this communicator's group in the FlightRecorder
};

}  // namespace strata::collective

template <>
inline constexpr bool strata::enable_collective<strata::collective::Mpi> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<strata::collective::Mpi> = true;
template <>
inline constexpr bool strata::collective::enable_wire_compression<strata::collective::Mpi> = true;
template <>
inline constexpr bool strata::collective::enable_host_shared_memory<strata::collective::Mpi> = true;

#endif  // STRATA_HAS_MPI

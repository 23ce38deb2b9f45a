/// \file
/// collective::Nccl — the ranks are CUDA devices, one per rank, and the buffers are device
/// memory (spans over device pointers: a cuda tensor's device_data<T>()). Communicators come
/// from a unique id that rank 0 makes and broadcasts through a *bootstrap*, any other policy
/// (Mpi under mpirun, Gloo under strata-run, InProcess for one process's GPUs on threads).
///
/// Nothing waits forever. Communicators are non-blocking (ncclConfig_t::blocking = 0); the
/// set-up and iallreduce's Work poll the device and NCCL's asynchronous error themselves, and
/// what the host does not poll — a blocking call's wait in cudaStreamSynchronize, collectives
/// ordered on the device behind the compute stream (start_allreduce_raw, join_compute) — has
/// a watchdog thread (detail::NcclWatchdog). A failed peer is NCCL's ncclRemoteError or a
/// system error: the communicator is aborted and the error names the collective. At the
/// deadline the communicator is aborted (ncclCommAbort: NCCL's kernels exit) and the rank runs
/// a barrier on the bootstrap, whose own deadline and census name the ranks that did not
/// arrive. STRATA_COLLECTIVE_DEBUG=1 compares fingerprints over the bootstrap before each call.
///
/// Buffers in host memory (a strategy's flags and counters, a metric) go through the
/// bootstrap instead, so every strategy's host-side agreement works over Nccl unchanged.
///
/// Blocking calls return with the result in device memory (their stream synchronised);
/// iallreduce returns a Work that either waits on the host (wait()) or orders a stream after
/// the collective without blocking the host (then(stream)); start_allreduce_raw and
/// join_compute leave the host out altogether (the gradient engine's device buckets).
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_NCCL
#error "strata::collective::Nccl needs NCCL: configure strata with -Dcuda=enabled -Dnccl=enabled (NCCL in the CUDA toolkit root), or by hand: -DSTRATA_HAS_CUDA=1 -DSTRATA_HAS_NCCL=1 -lnccl -lcudart"
#else

#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/collective/detail/nccl_watchdog.hpp>
#include <strata/collective/flight_recorder.hpp>  // current_label: the desync check's call sites
#include <strata/collective/options.hpp>
#include <strata/collective/typed_front_end.hpp>
#include <strata/kernels/cuda/runtime.hpp>
#include <strata/runtime/process.hpp>
#include <strata/support/error.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <strata/collective/gloo.hpp>
#endif

namespace strata::collective {

namespace detail {

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::f16: return ncclFloat16;  // NCCL reduces 16-bit floats itself
    case DType::bf16: return ncclBfloat16;
  }
  return ncclUint8;
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Mean: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Prod: return ncclProd;
  }
  return ncclSum;
}

/// What Nccl needs of its bootstrap policy, type-erased (the bootstrap outlives the Nccl):
/// the raw collectives, which also carry whatever a caller hands Nccl in host memory.
struct Bootstrap {
  int rank = 0, size = 1;
  std::function<void(const void*, void*, std::size_t, DType, ReduceOp)> allreduce;
  std::function<void(void*, std::size_t, DType, int)> broadcast;
  std::function<void(const void*, void*, std::size_t, DType)> allgather;
  std::function<void(const void*, void*, std::size_t, DType, ReduceOp)> reduce_scatter;
  std::function<void()> barrier;
  std::function<bool()> aborted;  ///< whether the bootstrap group was aborted (null: never known)

  template <class B>
  static Bootstrap of(B& b) {
    return {b.rank(),
            b.size(),
            [&b](const void* in, void* out, std::size_t n, DType t, ReduceOp op) { b.allreduce_raw(in, out, n, t, op); },
            [&b](void* x, std::size_t n, DType t, int root) { b.broadcast_raw(x, n, t, root); },
            [&b](const void* in, void* out, std::size_t n, DType t) { b.allgather_raw(in, out, n, t); },
            [&b](const void* in, void* out, std::size_t n, DType t, ReduceOp op) {
              b.reduce_scatter_raw(in, out, n, t, op);
            },
            [&b] { b.barrier(); },
            aborted_of(b)};
  }
  template <class B>
  static std::function<bool()> aborted_of(B& b) {
    if constexpr (ThreadGroupCollective<B>)  // threads of one process see an abort of their group
      return [&b] { return static_cast<bool>(b.aborted()); };
    else
      return {};
  }
};

/// True if `p` is device (or managed) memory, which NCCL can read; false for host memory.
inline bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an address the runtime does not know: host memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace detail

class Nccl : public TypedFrontEnd<Nccl> {
 public:
  static constexpr const char* name = "nccl";

  /// Joins the group of `bootstrap`'s ranks on `device` (this rank's GPU; ranks of one
  /// process need different devices). Collective over the bootstrap: every rank calls it.
  template <class B>
    requires(!std::is_same_v<B, Nccl>)
  Nccl(B& bootstrap, int device, Options o = Options::from_env())
      : Nccl(OwnedBootstrap{nullptr, detail::Bootstrap::of(bootstrap)}, device, o) {}

#if STRATA_HAS_MPI || STRATA_HAS_GLOO
  /// A rank of the launched job on the GPU of its local rank (modulo the GPUs it sees), with
  /// a bootstrap of its own: Mpi under mpirun (when the build has MPI), else Gloo.
  Nccl() : Nccl(default_bootstrap(), default_device(), Options::from_env()) {}
#endif

 private:
  using OwnedBootstrap = std::pair<std::shared_ptr<void>, detail::Bootstrap>;

  Nccl(OwnedBootstrap b, int device, Options o)
      : options_(o), owned_boot_(std::move(b.first)), boot_(std::move(b.second)), device_(device) {
    STRATA_CHECK(device >= 0 && device < kernels::cuda::device_count(), "Nccl: cuda:", device,
                 " does not exist (this process sees ", kernels::cuda::device_count(), " CUDA devices)");
    ncclUniqueId id{};
    if (boot_.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot_.broadcast(&id, sizeof id, DType::u8, 0);
    kernels::cuda::set_thread_device(device_);  // this rank's GPU from now on: no context on another one
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; wait_ready() polls with the deadline
    const ncclResult_t rc = ncclCommInitRankConfig(&comm_, boot_.size, id, boot_.rank, &config);
    if (rc != ncclInProgress) check(rc, "ncclCommInitRankConfig", comm_ != nullptr ? ncclGetLastError(comm_) : "");
    wait_ready("communicator set-up", setup_deadline());
    watchdog_ = std::make_unique<detail::NcclWatchdog>(
        device_, [this](std::string& why) { return health(why); },
        [this](detail::NcclWatchdog::Failure f, const std::string& why) { fail_from_watchdog(f, why); });
  }

#if STRATA_HAS_MPI || STRATA_HAS_GLOO
  static OwnedBootstrap default_bootstrap() {
    const auto p = runtime::detect_process();
#if STRATA_HAS_MPI
    if (p.launcher == "mpirun") {
      auto m = std::make_shared<Mpi>();
      return {m, detail::Bootstrap::of(*m)};
    }
#endif
#if STRATA_HAS_GLOO
    auto g = std::make_shared<Gloo>(p, "nccl-bootstrap", Options::from_env());
    return {g, detail::Bootstrap::of(*g)};
#else
    STRATA_THROW(invalid_argument, "strata.collective.nccl",
                 "this build bootstraps NCCL through MPI only: start the job "
                 "with mpirun, or pass a bootstrap policy to Nccl(bootstrap, device)");
#endif
  }
  static int default_device() {
    const int n = kernels::cuda::device_count();
    STRATA_CHECK(n > 0, "Nccl: this process sees no CUDA device (", kernels::cuda::no_device_reason(), ")");
    return runtime::detect_process().local_rank % n;
  }
#endif

 public:
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;
  ~Nccl() {
    watchdog_.reset();  // its thread reads the communicator
    if (comm_ != nullptr) {
      if (aborted_) {
        (void)ncclCommAbort(comm_);
      } else {
        (void)ncclCommFinalize(comm_);  // flushes; non-blocking: poll briefly, then free what is left
        ncclResult_t st = ncclInProgress;
        for (int i = 0; i < 10000 && st == ncclInProgress; ++i) {
          if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) break;
          if (st == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        (void)(st == ncclSuccess ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
      }
    }
    if (scratch_ != nullptr) (void)cudaFree(scratch_);
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  int rank() const noexcept { return boot_.rank; }
  int size() const noexcept { return boot_.size; }
  int device() const noexcept { return device_; }
  /// The stream NCCL's kernels run on.
  cudaStream_t stream() const noexcept { return stream_; }
  std::uint64_t sequence() const noexcept { return seq_; }

  // The typed overloads (allreduce, broadcast, allgather, reduce_scatter) come from TypedFrontEnd;
  // their spans are device memory of this rank's device.
  void barrier() {
    // NCCL has no barrier: an all-reduce of one device word is one.
    if (scratch_ == nullptr) {
      kernels::cuda::DeviceGuard on(device_);
      STRATA_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
      STRATA_CUDA_CHECK(cudaMemset(scratch_, 0, sizeof(float)));  // a defined word: no NaN to carry around
    }
    const Fingerprint fp{OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0, 0};
    run(fp, [&](cudaStream_t s) { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, s); });
  }

  /// An asynchronous collective on the NCCL stream.
  class Work {
   public:
    Work() = default;
    /// Blocks the host until the collective has finished (the deadline applies).
    void wait() {
      if (owner_ == nullptr) return;
      owner_->wait_event(event_.get(), fp_);
      owner_ = nullptr;
    }
    /// True once the collective has finished; throws if NCCL reported an error.
    bool test() {
      if (owner_ == nullptr) return true;
      owner_->poll_error(fp_);
      if (!event_.done()) return false;
      owner_ = nullptr;
      return true;
    }
    /// Makes `s` wait on the device for the collective, without blocking the host.
    void then(cudaStream_t s) const { event_.block(s); }

   private:
    friend class Nccl;
    Work(Nccl* owner, Fingerprint fp) : owner_(owner), fp_(fp) {}
    Nccl* owner_ = nullptr;
    Fingerprint fp_;
    kernels::cuda::Event event_;
  };

  /// Starts an in-place allreduce of device memory, after the work already queued on
  /// `after` (the stream that produced x; by default the device's compute stream).
  template <class T>
  Work iallreduce(std::span<T> x, ReduceOp op, cudaStream_t after = nullptr) {
    STRATA_CHECK(x.empty() || device_memory(x.data()), "Nccl::iallreduce needs device memory (the "
                 "blocking allreduce also takes host memory, through the bootstrap)");
    Fingerprint fp{OpKind::allreduce, op, dtype_v<T>, x.size(), 0, seq_++};
    return start_async(fp, after, [&] {
      return ncclAllReduce(x.data(), x.data(), x.size(), detail::nccl_type(dtype_v<T>), detail::nccl_op(op), comm_,
                           stream_);
    });
  }
  /// Queues `call` (an NCCL collective on the NCCL stream) after the work on `after`, and
  /// returns the Work that completes with it.
  template <class Call>
  Work start_async(Fingerprint fp, cudaStream_t after, Call&& call) {
    if (options_.check_fingerprints) check_fingerprint(fp);
    throw_if_failed(fp);
    kernels::cuda::DeviceGuard on(device_);  // Work's event belongs to the device current when it is made
    order_after(after);
    Work w(this, fp);
    enqueue(fp, std::forward<Call>(call));
    w.event_.record(stream_);
    async_in_flight_ = true;
    return w;
  }

  /// Starts an allgather of device memory (`out`: rank k's `in` at k |in|), after the work
  /// already queued on `after`.
  template <class T>
  Work iallgather(std::span<const T> in, std::span<T> out, cudaStream_t after = nullptr) {
    collective::detail::check_allgather_sizes(in.size(), out.size(), size());
    STRATA_CHECK(in.empty() || (device_memory(in.data()) && device_memory(out.data())),
                 "Nccl::iallgather needs device memory");
    Fingerprint fp{OpKind::allgather, ReduceOp::Sum, dtype_v<T>, in.size(), 0, seq_++};
    return start_async(fp, after, [&] {
      return ncclAllGather(in.data(), out.data(), in.size(), detail::nccl_type(dtype_v<T>), comm_, stream_);
    });
  }
  /// Starts a reduce-scatter of device memory (`out`: this rank's share), after the work
  /// already queued on `after`.
  template <class T>
  Work ireduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op, cudaStream_t after = nullptr) {
    collective::detail::check_reduce_scatter_sizes(in.size(), out.size(), size());
    STRATA_CHECK(out.empty() || (device_memory(in.data()) && device_memory(out.data())),
                 "Nccl::ireduce_scatter needs device memory");
    Fingerprint fp{OpKind::reduce_scatter, op, dtype_v<T>, out.size(), 0, seq_++};
    return start_async(fp, after, [&] {
      return ncclReduceScatter(in.data(), out.data(), out.size(), detail::nccl_type(dtype_v<T>), detail::nccl_op(op),
                               comm_, stream_);
    });
  }

  /// Starts an in-place all-reduce of `count` elements of device memory on the NCCL stream,
  /// after the work queued on the compute stream so far, and returns at once: no host thread
  /// waits for it. The compute stream sees the result after join_compute().
  void start_allreduce_raw(void* x, std::size_t count, DType dtype, ReduceOp op) {
    STRATA_CHECK(count == 0 || device_memory(x), "Nccl::start_allreduce_raw needs device memory");
    Fingerprint fp{OpKind::allreduce, op, dtype, count, 0, seq_++};
    if (options_.check_fingerprints) check_fingerprint(fp);
    throw_if_failed(fp);
    kernels::cuda::DeviceGuard on(device_);
    order_after(nullptr);
    enqueue(fp, [&] {
      return ncclAllReduce(x, x, count, detail::nccl_type(dtype), detail::nccl_op(op), comm_, stream_);
    });
    async_in_flight_ = true;
    unjoined_ = true;
    last_started_ = fp;
  }
  /// Makes the compute stream wait, on the device, for every collective started so far; the
  /// watchdog holds them to the deadline.
  void join_compute() {
    if (!unjoined_) return;
    throw_if_failed(last_started_);
    kernels::cuda::DeviceGuard on(device_);
    kernels::cuda::Event done = watchdog_->take_event();
    done.record(stream_);
    done.block(kernels::cuda::compute_stream(device_));
    watchdog_->watch(std::move(done), deadline(), last_started_);
    unjoined_ = false;
  }

  /// Aborts the communicator: NCCL's kernels on this rank stop, later calls fail with `reason`.
  void abort(const std::string& reason) { abort_as(Failure::error, reason); }

  void allreduce_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    throw_if_failed({OpKind::allreduce, op, dtype, count, 0, seq_});
    if (!device_memory(out)) return boot_.allreduce(in, out, count, dtype, op);
    run({OpKind::allreduce, op, dtype, count, 0, 0}, [&](cudaStream_t s) {
      return ncclAllReduce(in, out, count, detail::nccl_type(dtype), detail::nccl_op(op), comm_, s);
    });
  }
  /// A 16-bit float sum (gradient compression's wire format): NCCL reduces float16 and
  /// bfloat16 natively.
  void allreduce_sum16_raw(void* x, std::size_t count, DType dtype) {
    STRATA_CHECK(dtype == DType::f16 || dtype == DType::bf16, "allreduce_sum16_raw of ", name_of(dtype));
    allreduce_raw(x, x, count, dtype, ReduceOp::Sum);
  }
  void broadcast_raw(void* x, std::size_t count, DType dtype, int root) {
    throw_if_failed({OpKind::broadcast, ReduceOp::Sum, dtype, count, root, seq_});
    if (!device_memory(x)) return boot_.broadcast(x, count, dtype, root);
    run({OpKind::broadcast, ReduceOp::Sum, dtype, count, root, 0},
        [&](cudaStream_t s) { return ncclBroadcast(x, x, count, detail::nccl_type(dtype), root, comm_, s); });
  }
  void allgather_raw(const void* in, void* out, std::size_t count, DType dtype) {
    throw_if_failed({OpKind::allgather, ReduceOp::Sum, dtype, count, 0, seq_});
    if (!device_memory(out)) return boot_.allgather(in, out, count, dtype);
    run({OpKind::allgather, ReduceOp::Sum, dtype, count, 0, 0},
        [&](cudaStream_t s) { return ncclAllGather(in, out, count, detail::nccl_type(dtype), comm_, s); });
  }
  void reduce_scatter_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    throw_if_failed({OpKind::reduce_scatter, op, dtype, count, 0, seq_});
    if (!device_memory(out)) return boot_.reduce_scatter(in, out, count, dtype, op);
    run({OpKind::reduce_scatter, op, dtype, count, 0, 0}, [&](cudaStream_t s) {
      return ncclReduceScatter(in, out, count, detail::nccl_type(dtype), detail::nccl_op(op), comm_, s);
    });
  }

 private:
  friend class TypedFrontEnd<Nccl>;
  void before_blocking() noexcept {}  // the NCCL stream orders this rank's calls

  /// Set-up (communicator creation and its census) may take seconds on many GPUs: it gets at
  /// least this long, whatever the collectives' timeout.
  static constexpr std::chrono::milliseconds kSetupTimeout{30'000};

  std::chrono::steady_clock::time_point deadline() const {
    budget_ = options_.timeout;
    return std::chrono::steady_clock::now() + budget_;
  }
  std::chrono::steady_clock::time_point setup_deadline() const {
    budget_ = std::max(options_.timeout, kSetupTimeout);
    return std::chrono::steady_clock::now() + budget_;
  }

  /// Throws when `rc` is an error; `detail` is NCCL's last error text, read where the
  /// communicator is known to be alive.
  void check(ncclResult_t rc, const char* call, const std::string& detail = {}) const {
    if (rc == ncclSuccess) return;
    STRATA_THROW(collective_error, "strata.collective.nccl", "rank ", boot_.rank, ": ", call, " failed: ",
                 ncclGetErrorString(rc), (detail.empty() ? "" : " (" + detail + ")"));
  }

  using Failure = detail::NcclWatchdog::Failure;

  /// Aborts the communicator once (from the rank's thread or the watchdog's): NCCL's kernels
  /// exit, and every later call throws.
  void abort_as(Failure kind, const std::string& reason) {
    std::lock_guard lock(comm_mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    failure_ = kind;
    abort_reason_ = reason;
    // Known before ncclCommAbort, which may wait for the device: a call whose wait ends
    // meanwhile throws instead of returning what the abort cut short.
    aborted_.store(true, std::memory_order_release);
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  /// What the watchdog polls while work is in flight.
  Failure health(std::string& why) {
    {
      std::lock_guard lock(comm_mu_);
      if (comm_ == nullptr) return Failure::none;  // aborted already: the rank's next call throws
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
        why = std::string("NCCL reported ") + ncclGetErrorString(st) + " (" + ncclGetLastError(comm_) + ")" +
              (st == ncclRemoteError ? "; a peer failed or left the job" : "");
        return Failure::error;
      }
    }
    if (bootstrap_aborted()) return Failure::bootstrap;
    return Failure::none;
  }
  void fail_from_watchdog(Failure f, const std::string& why) {
    if (f == Failure::expired)
      abort_as(f, strata::detail::error_text("strata.collective.timeout", "rank ", boot_.rank, ": ", why,
                                             " did not complete within ", options_.timeout.count(), " ms"));
    else
      abort_as(f, why);
  }

  /// Throws when the communicator was aborted: at a deadline the watchdog saw, after a census
  /// over the bootstrap that names the ranks missing (once: the ranks take part in it once);
  /// when the bootstrap group was aborted, its reason; else the reason given.
  void throw_if_failed(const Fingerprint& fp) {
    if (!aborted_.load(std::memory_order_acquire)) return;
    if (failure_ == Failure::expired && !census_done_) {
      census_done_ = true;
      census(abort_reason_);
    }
    if (failure_ == Failure::bootstrap) boot_.barrier();  // throws the group's reason
    STRATA_THROW(collective_error, "strata.collective.aborted", "rank ", boot_.rank, ": ", fp.str(),
                 " on an aborted NCCL communicator: ", abort_reason_);
  }

  /// Queues the compute stream's work (or `after`'s) before the next NCCL call.
  void order_after(cudaStream_t after) {
    kernels::cuda::DeviceGuard on(device_);
    cudaStream_t producer = after != nullptr ? after : kernels::cuda::compute_stream(device_);
    STRATA_CUDA_CHECK(cudaEventRecord(done_, producer));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream_, done_, 0));
  }

  /// Issues one NCCL call (non-blocking communicator: it may answer ncclInProgress while it
  /// enqueues, so poll until it has).
  template <class Call>
  void enqueue(const Fingerprint& fp, Call&& call) {
    {
      std::lock_guard lock(comm_mu_);  // the watchdog may abort the communicator meanwhile
      if (comm_ != nullptr) {
        const ncclResult_t rc = call();  // (the caller has made this rank's device current)
        if (rc == ncclSuccess) return;   // enqueued: nothing to wait for before the next call
        if (rc != ncclInProgress) check(rc, name_of(fp.kind), ncclGetLastError(comm_));
      }
    }
    throw_if_failed(fp);  // aborted before the call
    wait_ready(fp.str().c_str(), deadline());
  }

  /// A blocking collective: queued after the compute stream's work, then waited for in
  /// cudaStreamSynchronize, as raw NCCL is, under the watchdog's deadline. With nothing of its
  /// own in flight on the NCCL stream it goes on the compute stream itself, which orders it
  /// after that work for free (no event, no second stream); behind an iallreduce or a
  /// start_allreduce_raw it goes on the NCCL stream, after the compute stream, so that this
  /// rank's collectives keep their order.
  template <class Call>
  void run(Fingerprint fp, Call&& call) {
    fp.seq = seq_++;
    if (options_.check_fingerprints) check_fingerprint(fp);
    kernels::cuda::DeviceGuard on(device_);
    cudaStream_t s = kernels::cuda::compute_stream(device_);
    if (async_in_flight_) {
      order_after(nullptr);
      s = stream_;
    }
    enqueue(fp, [&] { return call(s); });
    cudaError_t rc;
    {
      // The CUDA runtime's own wait (raw NCCL's cost); the watchdog aborts NCCL at the
      // deadline or a failure, which ends it.
      const detail::NcclWatchdog::Blocking watched(*watchdog_, fp, deadline());
      rc = cudaStreamSynchronize(s);
    }
    throw_if_failed(fp);
    kernels::cuda::check(rc, "cudaStreamSynchronize");
    if (s == stream_) async_in_flight_ = false;  // the NCCL stream has run everything queued on it
  }

  /// Polls the communicator until it is no longer busy with its last call.
  void wait_ready(const char* what, std::chrono::steady_clock::time_point until) {
    for (int spins = 0;; ++spins) {
      if (aborted_.load(std::memory_order_acquire))
        STRATA_THROW(collective_error, "strata.collective.aborted", "rank ", boot_.rank, ": ", what,
                     " on an aborted NCCL communicator: ", abort_reason_);
      const ncclResult_t st = async_error();
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail(st, what);
      if (std::chrono::steady_clock::now() > until) expire(what);
      if ((spins & 63) == 63 && bootstrap_aborted()) abandon(what);
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void poll_error(const Fingerprint& fp) {
    throw_if_failed(fp);
    const ncclResult_t st = async_error();
    if (st != ncclSuccess && st != ncclInProgress) fail(st, fp.str().c_str());
  }
  /// The communicator's asynchronous state (ncclInvalidUsage once aborted).
  ncclResult_t async_error() {
    std::lock_guard lock(comm_mu_);
    if (comm_ == nullptr) return ncclInvalidUsage;
    ncclResult_t st = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &st);
    if (rc != ncclSuccess) check(rc, "ncclCommGetAsyncError", ncclGetLastError(comm_));
    return st;
  }

  /// Waits on the host until `done()` says the collective finished, with the deadline. NCCL's
  /// own error state is read every 64th poll: a failed peer surfaces within microseconds
  /// either way, and the spin stays one CUDA query.
  template <class Done>
  void wait_until(Done&& done, const Fingerprint& fp) {
    const auto until = deadline();
    for (int spins = 0;; ++spins) {
      if (done()) return;
      if ((spins & 63) == 63) {
        poll_error(fp);
        if (bootstrap_aborted()) abandon(fp.str().c_str());
        if (std::chrono::steady_clock::now() > until) expire(fp.str().c_str());
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  /// Waits on the host for `event` (recorded after a collective), with the deadline.
  void wait_event(cudaEvent_t event, const Fingerprint& fp) {
    wait_until([&] { return query(cudaEventQuery(event), "cudaEventQuery"); }, fp);
  }
  static bool query(cudaError_t rc, const char* call) {
    if (rc == cudaSuccess) return true;
    if (rc != cudaErrorNotReady) kernels::cuda::check(rc, call);
    return false;
  }

  [[noreturn]] void fail(ncclResult_t st, const char* what) {
    std::string detail;
    {
      std::lock_guard lock(comm_mu_);
      if (comm_ != nullptr) detail = ncclGetLastError(comm_);
    }
    abort(std::string("NCCL reported ") + ncclGetErrorString(st));
    STRATA_THROW(collective_error, "strata.collective.nccl", "rank ", boot_.rank, ": ", what, " failed: ",
                 ncclGetErrorString(st), (detail.empty() ? "" : " (" + detail + ")"), (st == ncclRemoteError ? "; a peer failed or left the job" : ""));
  }

  bool bootstrap_aborted() const { return boot_.aborted && boot_.aborted(); }

  /// Whether `p` is device memory, remembering the device addresses seen (a gradient bucket's
  /// every step): the runtime's answer costs ~0.2 us a call. An address the runtime once
  /// reported as device memory lies in the range CUDA reserves for device allocations under
  /// unified addressing, so it never becomes host memory; host addresses are asked each time.
  bool device_memory(const void* p) {
    const auto key = reinterpret_cast<std::uintptr_t>(p);
    std::atomic<std::uintptr_t>& slot = known_device_[(key >> 8) % known_device_.size()];
    if (key != 0 && slot.load(std::memory_order_relaxed) == key) return true;
    if (!detail::is_device_memory(p)) return false;
    slot.store(key, std::memory_order_relaxed);
    return true;
  }

  /// The bootstrap group was aborted (a peer replica failed): stop waiting for the peers,
  /// abort NCCL here, and fail with the group's reason (its barrier throws it).
  [[noreturn]] void abandon(const char* what) {
    abort(std::string(what) + " abandoned: the bootstrap group was aborted");
    boot_.barrier();
    STRATA_THROW(collective_error, "strata.collective.aborted", "rank ", boot_.rank, ": ", what,
                 " abandoned: the bootstrap group was aborted");
  }

  /// The deadline passed: abort NCCL, then let the bootstrap's barrier name who is missing.
  [[noreturn]] void expire(const char* what) {
    const std::string head = strata::detail::error_text("strata.collective.timeout", "rank ", boot_.rank, ": ", what,
                                                        " did not complete within ",
                                                        budget_.count(), " ms");
    abort_as(Failure::expired, head);
    census_done_ = true;
    census(head);
  }
  [[noreturn]] void census(const std::string& head) {
    try {
      boot_.barrier();
    } catch (const std::exception& e) {
      throw timeout_error(head + "; the census over the bootstrap: " + e.what());
    }
    throw timeout_error(head + "; every rank reached the census over the bootstrap afterwards, so no peer is gone: "
                               "NCCL itself made no progress (NCCL_DEBUG=INFO shows why)");
  }

  void check_fingerprint(const Fingerprint& fp) {
    std::vector<std::uint64_t> mine(kCheckWords), all(kCheckWords * static_cast<std::size_t>(size()));
    pack_checked_call(fp, FlightRecorder::current_label(), mine.data());
    boot_.allgather(mine.data(), all.data(), mine.size(), DType::i64);  // words as int64: a dtype every policy has
    if (auto msg = fingerprint_mismatch(rank(), fp, all.data(), size()); !msg.empty()) throw collective_error(msg);
  }

  Options options_;
  mutable std::chrono::milliseconds budget_{0};  // the budget of the deadline last set (its timeout message)
  std::shared_ptr<void> owned_boot_;  ///< the bootstrap this rank made itself (default constructor)
  detail::Bootstrap boot_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;  ///< the barrier's one device word
  std::uint64_t seq_ = 0;
  bool async_in_flight_ = false;  ///< an iallreduce was queued on the NCCL stream since it was last idle
  bool unjoined_ = false;          ///< started collectives the compute stream does not wait for yet
  Fingerprint last_started_{};
  std::mutex comm_mu_;  ///< comm_ between this rank's calls and the watchdog's abort
  std::atomic<bool> aborted_{false};
  Failure failure_ = Failure::none;  ///< why it was aborted (written before aborted_)
  std::string abort_reason_;
  bool census_done_ = false;
  std::array<std::atomic<std::uintptr_t>, 16> known_device_{};  ///< device addresses seen (device_memory)
  std::unique_ptr<detail::NcclWatchdog> watchdog_;  ///< last: it calls into the members above
};

}  // namespace strata::collective

template <>
inline constexpr bool strata::enable_collective<strata::collective::Nccl> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<strata::collective::Nccl> = true;
template <>
inline constexpr bool strata::collective::enable_wire_compression<strata::collective::Nccl> = true;
template <>
inline constexpr bool strata::collective::enable_device_collective<strata::collective::Nccl> = true;

#endif  // STRATA_HAS_NCCL

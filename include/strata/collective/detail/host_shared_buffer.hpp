/// \file
/// Buffers that the processes of a one-host group share: a POSIX shared-memory segment with a
/// control block and one region per rank, every region mapped by every rank. An all-reduce of
/// such a buffer is the in-process algorithm across processes: each rank reduces one range of
/// every rank's region and writes the result into all of them — one read and one write of the
/// buffer per rank, nothing copied through a transport (Open MPI's shared-memory transport
/// copies each byte in and out of its own segment, in fragments; Gloo goes through TCP).
/// MultiWorkerMirroredStrategy keeps its gradient buckets in them when every rank runs on one
/// host (docs/collectives.md, "Shared-memory buffers").
///
/// Ranks meet at barriers on counters in the control block: a short spin, then a futex wait on
/// the shared word with a 10 ms tick, at which the waiter checks the group's abort flag, its
/// deadline and whether the ranks it waits for are still running, so a rank that dies or
/// stalls is named, never waited on forever.
#pragma once

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <strata/collective/detail/wait_policy.hpp>  // cpu_relax
#include <strata/collective/detail/reduce.hpp>
#include <strata/collective/options.hpp>  // OpKind
#include <strata/collective/reduce_op.hpp>
#include <strata/runtime/process.hpp>        // env
#include <strata/runtime/process_state.hpp>  // process_state
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::collective::detail {

/// One shared buffer of `bytes` per rank — or, `common`, one region that every rank maps as
/// its own (the same memory everywhere); made collectively by HostSharedBuffers::make.
class HostSharedBuffer {
 public:
  HostSharedBuffer(void* base, std::size_t total, std::size_t region, int rank, int size, bool common = false)
      : base_(static_cast<char*>(base)), total_(total), region_(region), rank_(rank), size_(size), common_(common) {}
  ~HostSharedBuffer() { ::munmap(base_, total_); }
  HostSharedBuffer(const HostSharedBuffer&) = delete;
  HostSharedBuffer& operator=(const HostSharedBuffer&) = delete;

  /// Bytes of the control block: the abort flag and reason, then one cache line per rank.
  static std::size_t control_bytes(int size) { return round_up(kPeersAt + kLine * static_cast<std::size_t>(size), 4096); }
  static std::size_t region_stride(std::size_t bytes) { return round_up(std::max<std::size_t>(bytes, 1), 4096); }

  void* mine() const noexcept { return region(rank_); }
  int ranks() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return region_; }
  /// True if [p, p + bytes) lies in this rank's region.
  bool holds(const void* p, std::size_t bytes) const noexcept {
    const char* c = static_cast<const char*>(p);
    return c >= region(rank_) && c + bytes <= region(rank_) + region_;
  }

  /// Writes this rank's pid where the others look for it (before the group's first barrier).
  void publish_pid() noexcept { peer(rank_).pid = static_cast<std::int64_t>(::getpid()); }

  /// All-reduces the first `count` elements of this rank's region with every rank's, in place.
  /// `what` names the call in errors (e.g. "allreduce #12"). Every rank must pass the same
  /// count, dtype and op: a difference is an error naming both ranks.
  void allreduce(std::size_t count, DType dtype, ReduceOp op, std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(count, kind_of(OpKind::allreduce, dtype, op), deadline, timeout, what, kSpinArrival);
    reduce_shares(count, dtype, op);
    barrier(deadline, timeout, what, kSpinShares);  // every share is final in every region
  }

  /// The same on buffers outside the segment (`in` may equal `out`): staged through this
  /// rank's region, a region's worth at a time.
  void allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op, std::chrono::milliseconds timeout,
                 const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(count, kind_of(OpKind::allreduce, dtype, op), deadline, timeout, what);
    const std::size_t size = size_of(dtype), step = region_ / size;
    for (std::size_t at = 0; at < count; at += step) {
      const std::size_t n = std::min(step, count - at);
      if (at > 0) barrier(deadline, timeout, what, kSpinShares);  // every rank has copied the last chunk out
      std::memcpy(mine(), static_cast<const char*>(in) + at * size, n * size);
      barrier(deadline, timeout, what, kSpinShares);
      reduce_shares(n, dtype, op);
      barrier(deadline, timeout, what, kSpinShares);
      std::memcpy(static_cast<char*>(out) + at * size, mine(), n * size);
    }
    barrier(deadline, timeout, what, kSpinShares);  // the regions are free for the next call
  }

  /// Broadcasts `bytes` of `x` from `root`, through root's region.
  void broadcast(void* x, std::size_t bytes, int root, std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(bytes, kind_of(OpKind::broadcast, DType::u8, ReduceOp::Sum) | static_cast<std::uint64_t>(root) << 32, deadline,
         timeout, what);
    for (std::size_t at = 0; at < bytes; at += region_) {
      const std::size_t n = std::min(region_, bytes - at);
      if (at > 0) barrier(deadline, timeout, what, kSpinShares);
      if (rank_ == root) std::memcpy(region(root), static_cast<const char*>(x) + at, n);
      barrier(deadline, timeout, what, kSpinShares);
      if (rank_ != root) std::memcpy(static_cast<char*>(x) + at, region(root), n);
    }
    barrier(deadline, timeout, what, kSpinShares);
  }

  /// Gathers every rank's `bytes` of `in` into `out` (rank k's at k * bytes), through the regions.
  void allgather(const void* in, void* out, std::size_t bytes, std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(bytes, kind_of(OpKind::allgather, DType::u8, ReduceOp::Sum), deadline, timeout, what);
    for (std::size_t at = 0; at < bytes; at += region_) {
      const std::size_t n = std::min(region_, bytes - at);
      if (at > 0) barrier(deadline, timeout, what, kSpinShares);
      std::memcpy(mine(), static_cast<const char*>(in) + at, n);
      barrier(deadline, timeout, what, kSpinShares);
      for (int k = 0; k < size_; ++k) std::memcpy(static_cast<char*>(out) + static_cast<std::size_t>(k) * bytes + at, region(k), n);
    }
    barrier(deadline, timeout, what, kSpinShares);
  }

  /// Reduces rank k's `count` elements of `in` (at k * count) over every rank into this
  /// rank's `out` (`count` elements), through the regions: a piece of every rank's share at a
  /// time, each rank writing its pieces into its own region and reducing its own share of
  /// every region, in rank order (the sum allreduce() makes).
  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                      std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(count, kind_of(OpKind::reduce_scatter, dtype, op), deadline, timeout, what);
    const std::size_t size = size_of(dtype), ranks = static_cast<std::size_t>(size_);
    const std::size_t step = std::max<std::size_t>(region_ / size / ranks, 1);
    STRATA_CHECK(step * ranks * size <= region_, "reduce_scatter: a region of ", region_, " bytes holds no element of ",
                 ranks, " ranks");
    for (std::size_t at = 0; at < count; at += step) {
      const std::size_t n = std::min(step, count - at);
      if (at > 0) barrier(deadline, timeout, what, kSpinShares);  // every rank has read the last pieces
      for (std::size_t k = 0; k < ranks; ++k)
        std::memcpy(region(rank_) + k * n * size, static_cast<const char*>(in) + (k * count + at) * size, n * size);
      barrier(deadline, timeout, what, kSpinShares);
      visit_collective_dtype(dtype, [&](auto s, auto a) {
        using S = decltype(s);
        const std::size_t from = static_cast<std::size_t>(rank_) * n;
        reduce_across<S, decltype(a)>(
            0, n, op, [&](int k) { return static_cast<const S*>(static_cast<const void*>(region(k))) + from; },
            [&](int k) { return k == 0 ? static_cast<S*>(out) + at : nullptr; }, size_);
      });
    }
    barrier(deadline, timeout, what, kSpinShares);  // the regions are free for the next call
  }

  /// Waits until every rank has called it (a barrier of this buffer's group), spinning then
  /// sleeping like the collectives; `what` names it in errors. Every rank must call the same
  /// sequence of operations on a buffer: a barrier that meets another rank's all-reduce is an
  /// error naming both.
  void sync(std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    meet(0, kind_of(OpKind::barrier, DType::u8, ReduceOp::Sum), deadline, timeout, what);
  }

  /// Rank k's region, as this rank maps it (a common buffer's one region for every k).
  char* region(int k) const noexcept {
    return base_ + control_bytes(size_) + region_stride(region_) * static_cast<std::size_t>(common_ ? 0 : k);
  }
  bool common() const noexcept { return common_; }

  /// Fails the group's current and later waits with `reason` (the first reason stays).
  void abort(const std::string& reason) noexcept {
    std::uint32_t expected = 0;
    if (control().aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::snprintf(control().reason, sizeof control().reason, "%s", reason.c_str());
      control().aborted.store(2, std::memory_order_release);
    }
  }

 private:
  static constexpr std::size_t kLine = 64, kPeersAt = 1024;
  // Spins before a futex sleep. Arrival at a gradient bucket's all-reduce (the communication
  // thread, while backward computes) waits on the slowest rank's backward pass: sleep soon,
  // and leave the core to compute. The other barriers wait only for the others' equal share
  // of the work, and a staged call's caller has nothing else to do: spin through them rather
  // than pay a sleep and a wake-up. A replica's own thread with a core for each rank spins
  // longer at every barrier (spin_wait, wait_policy.hpp).
  static constexpr int kSpinArrival = 256, kSpinShares = 1 << 14;
  struct Control {
    std::atomic<std::uint32_t> aborted;  // 0, 1 while the reason is written, 2 after
    char reason[kPeersAt - 64];
  };
  struct alignas(64) Peer {
    std::atomic<std::uint32_t> arrived;  // barriers passed; a futex word
    std::int64_t pid;
    std::uint64_t count, kind;
  };
  static_assert(sizeof(Control) <= kPeersAt && sizeof(Peer) == kLine);
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

  static std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
  static std::uint64_t kind_of(OpKind k, DType dtype, ReduceOp op) {
    return static_cast<std::uint64_t>(k) << 16 | static_cast<std::uint64_t>(dtype) << 8 | static_cast<std::uint64_t>(op);
  }
  static std::string describe(std::uint64_t count, std::uint64_t kind) {
    const auto k = static_cast<OpKind>(kind >> 16 & 255);
    if (k == OpKind::barrier) return "barrier";
    std::string d = std::string(name_of(k)) + " of " + std::to_string(count);
    if (k == OpKind::allreduce || k == OpKind::reduce_scatter)
      d += " x " + std::string(name_of(static_cast<DType>(kind >> 8 & 255))) + ", " +
           name_of(static_cast<ReduceOp>(kind & 255));
    else
      d += " bytes";
    if (k == OpKind::broadcast) d += " from rank " + std::to_string(kind >> 32);
    return d;
  }

  // Every rank says what it calls, then all compare: a difference fails every rank, naming
  // both sides (a count that differs would otherwise read past another rank's data).
  void meet(std::uint64_t count, std::uint64_t kind, std::chrono::steady_clock::time_point deadline,
            std::chrono::milliseconds timeout, const std::string& what, int spins = kSpinShares) {
    if (control().aborted.load(std::memory_order_acquire) != 0) check(rank_, deadline, timeout, what);
    Peer& me = peer(rank_);
    me.count = count;
    me.kind = kind;
    barrier(deadline, timeout, what, spins);
    for (int k = 0; k < size_; ++k) {
      const Peer& p = peer(k);
      if (p.count != count || p.kind != kind)
        fail<collective_error>(strata::detail::error_text("strata.collective.mismatch", what, ": rank ", rank_,
                                                          " calls ", describe(count, kind), ", rank ", k, " ",
                                                          describe(p.count, p.kind)));
    }
  }

  // Reduces this rank's share of the first `count` elements of every region into all of them.
  void reduce_shares(std::size_t count, DType dtype, ReduceOp op) {
    const std::size_t lo = share_begin(count, rank_, size_), hi = share_begin(count, rank_ + 1, size_);
    visit_collective_dtype(dtype, [&](auto s, auto a) {
      using S = decltype(s);
      reduce_across<S, decltype(a)>(
          lo, hi, op, [&](int k) { return static_cast<const S*>(static_cast<const void*>(region(k))); },
          [&](int k) { return static_cast<S*>(static_cast<void*>(region(k))); }, size_);
    });
  }
  Control& control() const noexcept { return *reinterpret_cast<Control*>(base_); }
  Peer& peer(int k) const noexcept { return *reinterpret_cast<Peer*>(base_ + kPeersAt + kLine * static_cast<std::size_t>(k)); }

  template <class E>
  [[noreturn]] void fail(const std::string& msg) {
    abort(msg);
    throw E(msg);
  }

  // Arrives at the group's next barrier and waits for every rank to arrive.
  void barrier(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout, const std::string& what,
               int spins) {
    const std::uint32_t target = ++passed_;
    Peer& me = peer(rank_);
    me.arrived.store(target, std::memory_order_release);
    ::syscall(SYS_futex, &me.arrived, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    for (int k = 0; k < size_; ++k) {
      Peer& p = peer(k);
      auto behind = [&] { return static_cast<std::int32_t>(p.arrived.load(std::memory_order_acquire) - target) < 0; };
      spin_wait(size_, spins, [&] { return !behind(); });
      while (behind()) {
        const std::uint32_t seen = p.arrived.load(std::memory_order_acquire);
        if (static_cast<std::int32_t>(seen - target) >= 0) break;
        const timespec tick{0, 10'000'000};  // 10 ms: then check abort, deadline and liveness
        ::syscall(SYS_futex, &p.arrived, FUTEX_WAIT, seen, &tick, nullptr, 0);
        if (!behind()) break;  // a peer may pass the barrier and exit at once: arrival wins over liveness
        check(k, deadline, timeout, what);
      }
    }
  }

  void check(int k, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
             const std::string& what) {
    if (control().aborted.load(std::memory_order_acquire) != 0) {
      while (control().aborted.load(std::memory_order_acquire) != 2) cpu_relax();
      STRATA_THROW(collective_error, "strata.collective.aborted", what, " on rank ", rank_, ": ", control().reason);
    }
    const char st = runtime::process_state(static_cast<long>(peer(k).pid));
    // Read the arrival again after the state: a peer that arrived and then exited is not lost.
    if (runtime::is_gone(st) && static_cast<std::int32_t>(peer(k).arrived.load(std::memory_order_acquire) - passed_) < 0)
      fail<collective_error>(strata::detail::error_text("strata.collective.peer", what, " on rank ", rank_, " of ",
                                                        size_, ": peer lost: rank ", k, " is no longer running (pid ",
                                                        peer(k).pid, ")"));
    if (std::chrono::steady_clock::now() < deadline) return;
    std::ostringstream os;
    os << strata::detail::error_text("strata.collective.timeout") << what << " on rank " << rank_ << " of " << size_ << ": not complete within "
       << std::chrono::duration<double>(timeout).count() << " s;";
    const std::uint32_t target = passed_;
    for (int j = 0; j < size_; ++j)
      if (static_cast<std::int32_t>(peer(j).arrived.load(std::memory_order_acquire) - target) < 0) {
        const char sj = runtime::process_state(static_cast<long>(peer(j).pid));
        os << " did not arrive: rank " << j
           << (runtime::is_stopped(sj) ? " is stopped (SIGSTOP or a debugger);"
               : runtime::is_gone(sj)  ? " is no longer running;"
                                       : " is running but did not reach it (skipped, or busy elsewhere);");
      }
    fail<timeout_error>(os.str());
  }

  char* base_;
  std::size_t total_, region_;
  int rank_, size_;
  bool common_;  // one region, the same memory on every rank
  std::uint32_t passed_ = 0;  // this rank's barriers so far (the same on every rank between calls)
};

/// The shared buffers of one communicator: makes them (collectively) and finds the one a
/// pointer lies in. Unavailable — make() returns an undefined tensor on every rank — when the
/// ranks span hosts, STRATA_SHM=0 on any rank, the group has one rank, or a segment cannot be
/// made (/dev/shm full: the space is reserved up front, so a short /dev/shm is this error, not
/// a SIGBUS later).
class HostSharedBuffers {
 public:
  /// Collective over `comm` (Mpi or Gloo): every rank calls it with the same count and dtype.
  /// `common`: one region that every rank maps (the tensor is the same memory on every rank),
  /// which an in-place all-reduce leaves to the transport; else a region per rank.
  template <class Comm>
  Tensor make(Comm& comm, std::int64_t count, DType dtype, bool common = false) {
    if (count <= 0) return {};
    auto buf = create(comm, static_cast<std::size_t>(count) * size_of(dtype), common);
    if (!buf) return {};
    std::lock_guard lock(mu_);
    buffers_.push_back(buf);
    return strata::detail::tensor_over(buf->mine(), Shape{count}, dtype, buf);
  }

  /// This communicator's staging buffer (kStagingBytes per rank) for collectives on buffers
  /// outside the segment, made at the first call; null when unavailable. Collective on its
  /// first call: every rank makes it in the same collective.
  template <class Comm>
  HostSharedBuffer* staging(Comm& comm) {
    if (!staging_tried_) {
      staging_tried_ = true;
      staging_ = create(comm, kStagingBytes);
      std::lock_guard lock(mu_);
      if (staging_) buffers_.push_back(staging_);
    }
    return staging_.get();
  }

  /// The same, `seq` (the caller's sequence number) left as it was: the collectives that make
  /// the buffer do not count in it.
  template <class Comm>
  HostSharedBuffer* staging(Comm& comm, std::uint64_t& seq) {
    const std::uint64_t kept = seq;
    HostSharedBuffer* b = staging(comm);
    seq = kept;
    return b;
  }

  /// Per rank: 4 MiB, a few L2s' worth; larger collectives go through it in steps.
  static constexpr std::size_t kStagingBytes = std::size_t{4} << 20;

  /// The buffer with a region per rank whose region on this rank holds [p, p + bytes) (an
  /// in-place all-reduce of it reduces across the regions), or null.
  HostSharedBuffer* find(const void* p, std::size_t bytes) const {
    HostSharedBuffer* b = find_shared(p, bytes).get();
    return b == nullptr || b->common() ? nullptr : b;
  }
  /// A barrier of the group through the buffer that holds `mine` (this rank's region).
  void sync(const Tensor& mine, std::chrono::milliseconds timeout, const std::string& what) const {
    auto buf = find_shared(mine.raw_data(), mine.nbytes());
    STRATA_CHECK(buf != nullptr, "HostSharedBuffers::sync: the tensor is not in this group's shared memory");
    buf->sync(timeout, what);
  }

  /// Rank k's copy of `mine` (a tensor in this rank's region of one of these buffers): a
  /// tensor over the same place in rank k's region, which keeps the buffer mapped (`mine`'s
  /// own memory for a common buffer).
  Tensor peer(const Tensor& mine, int k) const {
    STRATA_CHECK(mine.defined() && mine.is_contiguous(), "HostSharedBuffers::peer of a tensor that is not contiguous");
    auto buf = find_shared(mine.raw_data(), mine.nbytes());
    STRATA_CHECK(buf != nullptr, "HostSharedBuffers::peer: the tensor is not in this group's shared memory");
    STRATA_CHECK(k >= 0 && k < buf->ranks(), "HostSharedBuffers::peer: rank ", k, " of ", buf->ranks());
    const auto offset = static_cast<std::size_t>(static_cast<const char*>(mine.raw_data()) -
                                                 static_cast<const char*>(buf->mine()));
    return strata::detail::tensor_over(buf->region(k) + offset, mine.shape(), mine.dtype(), buf);
  }

  /// Fails every rank's waits on these buffers with `reason`.
  void abort(const std::string& reason) noexcept {
    std::lock_guard lock(mu_);
    for (const auto& b : buffers_) b->abort(reason);
  }

 private:
  // Makes one buffer of `region` bytes per rank, or null on every rank (see the class comment).
  template <class Comm>
  static std::shared_ptr<HostSharedBuffer> create(Comm& comm, std::size_t region, bool common = false) {
    const int n = comm.size(), r = comm.rank();
    if (n < 2) return nullptr;
    // Everyone's willingness, host, pid and size: every rank then decides the same.
    const std::int64_t mine[4] = {willing() ? 1 : 0, static_cast<std::int64_t>(host_id()),
                                  static_cast<std::int64_t>(::getpid()), static_cast<std::int64_t>(region)};
    std::vector<std::int64_t> all(4 * static_cast<std::size_t>(n));
    comm.allgather_raw(mine, all.data(), 4, DType::i64);
    for (int k = 0; k < n; ++k) {
      const std::int64_t* theirs = all.data() + 4 * static_cast<std::size_t>(k);
      STRATA_REQUIRE(theirs[3] == mine[3], invalid_argument, "strata.collective.mismatch", "shared buffer: rank ", r,
                     " asks for ", mine[3],
                     " bytes, rank ", k, " for ", theirs[3]);
    }
    for (int k = 0; k < n; ++k) {
      const std::int64_t* theirs = all.data() + 4 * static_cast<std::size_t>(k);
      if (theirs[0] == 0 || theirs[1] != all[1]) return nullptr;
    }
    const std::size_t regions = common ? 1 : static_cast<std::size_t>(n);
    const std::size_t total = HostSharedBuffer::control_bytes(n) + HostSharedBuffer::region_stride(region) * regions;
    // Rank 0 makes the segment and passes its name on; everyone maps it; rank 0 unlinks it
    // once all have (nothing is left in /dev/shm, however the job ends after that).
    std::int64_t name_words[8] = {};
    char* name = reinterpret_cast<char*>(name_words);
    void* base = MAP_FAILED;
    if (r == 0) {
      std::random_device rd;
      std::snprintf(name, sizeof name_words, "/strata-%ld-%u-%u", static_cast<long>(::getpid()), counter_++, rd());
      base = create_segment(name, total);
      if (base == MAP_FAILED) name[0] = '\0';
    }
    comm.broadcast_raw(name_words, 8, DType::i64, 0);
    if (r != 0 && name[0] != '\0') base = open_segment(name, total);
    const std::int64_t ok = base != MAP_FAILED;
    std::vector<std::int64_t> oks(static_cast<std::size_t>(n));
    comm.allgather_raw(&ok, oks.data(), 1, DType::i64);
    if (r == 0 && name[0] != '\0') ::shm_unlink(name);
    bool everyone = true;
    for (std::int64_t o : oks) everyone = everyone && o != 0;
    if (!everyone) {
      if (base != MAP_FAILED) ::munmap(base, total);
      return nullptr;
    }
    auto buf = std::make_shared<HostSharedBuffer>(base, total, region, r, n, common);
    buf->publish_pid();
    comm.barrier();  // every pid is written before anyone waits on a peer
    return buf;
  }
  static bool willing() {
    const char* v = runtime::detail::env("STRATA_SHM");
    return v == nullptr || std::string(v) != "0";
  }
  // The host, its boot and the pid namespace: the ranks must share a /dev/shm and see each
  // other's pids (to tell a peer that died from one that is slow).
  static std::uint64_t host_id() {
    char host[256] = {}, ns[128] = {};
    ::gethostname(host, sizeof host - 1);
    if (::readlink("/proc/self/ns/pid", ns, sizeof ns - 1) < 0) ns[0] = '?';
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    return std::hash<std::string>{}(std::string(host) + "/" + boot + "/" + ns);
  }
  static void* map(int fd, std::size_t total) {
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    return p;
  }
  static void* create_segment(const char* name, std::size_t total) {
    const int fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return MAP_FAILED;
    if (::ftruncate(fd, static_cast<off_t>(total)) != 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(total)) != 0) {
      ::close(fd);
      ::shm_unlink(name);
      return MAP_FAILED;
    }
    return map(fd, total);  // zero-filled: no rank has arrived anywhere
  }
  static void* open_segment(const char* name, std::size_t total) {
    const int fd = ::shm_open(name, O_RDWR, 0600);
    return fd < 0 ? MAP_FAILED : map(fd, total);
  }

  std::shared_ptr<HostSharedBuffer> find_shared(const void* p, std::size_t bytes) const {
    std::lock_guard lock(mu_);
    for (const auto& b : buffers_)
      if (b->holds(p, bytes)) return b;
    return nullptr;
  }

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<HostSharedBuffer>> buffers_;
  std::shared_ptr<HostSharedBuffer> staging_;
  bool staging_tried_ = false;
  static inline std::atomic<unsigned> counter_{0};
};

}  // namespace strata::collective::detail

/// \file
/// collective::Gloo — the ranks are processes connected by Gloo's TCP transport; launched by
/// strata-run (or anything that sets the STRATA_* variables). Rendezvous goes through a file
/// store in STRATA_RENDEZVOUS_DIR (strata-run makes a fresh one, mode 0700) or, when that is
/// unset, the TCP store rank 0 serves on STRATA_MASTER_ADDR:PORT (runtime/tcp_store.hpp); the network
/// interface is STRATA_IFNAME (default: loopback, 127.0.0.1). Gloo's own deadline applies to
/// every call: a stalled peer is a timeout error naming the collective and its sequence
/// number; a dead peer is an error at once (its socket closes).
///
/// When every rank runs on one host, allreduce, broadcast, allgather and reduce_scatter go
/// through shared memory instead of TCP (detail::HostSharedBuffers: a staging region per
/// rank, or the caller's own shared buffer, zero-copy); `STRATA_SHM=0` keeps them on Gloo's
/// transport. barrier always uses Gloo's.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_GLOO
#error "strata::collective::Gloo needs Gloo: configure strata with -Dgloo=enabled (Debian: libgloo-dev), or by hand: -DSTRATA_HAS_GLOO=1 -lgloo"
#else  // the rest only where the build has it: the #error above is then the only message

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <csignal>
#include <fcntl.h>
#include <signal.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/collective/async.hpp>
#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/collective/detail/gloo_rendezvous.hpp>
#include <strata/collective/detail/host_shared_buffer.hpp>
#include <strata/collective/detail/reduce.hpp>
#include <strata/collective/detail/wait_policy.hpp>  // WaitTimer
#include <strata/collective/flight_recorder.hpp>
#include <strata/collective/options.hpp>
#include <strata/collective/typed_front_end.hpp>
#include <strata/runtime/process.hpp>
#include <strata/runtime/process_state.hpp>
#include <strata/runtime/tcp_store.hpp>
#include <strata/support/crypto.hpp>
#include <strata/support/error.hpp>

namespace strata::collective {

namespace detail {

/// Gloo's reduction callback: out = a op b (out may alias a or b), through the vectorised
/// combine() kernels.
template <class T>
void gloo_reduce(ReduceOp op, void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (o == y) std::swap(x, y);  // every op here is commutative
  if (o != x) std::copy_n(x, n, o);
  combine<T>(op, n, o, y);
}

/// Gloo's reduce-function shape for a 16-bit float sum: out = a + b (out may alias either).
template <class S>
void add16_into(void* out, const void* a, const void* b, std::size_t n) {
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  if (o == y) std::swap(x, y);  // a sum commutes
  if (o != x) std::copy_n(x, n, o);
  add16<S>(n, o, y);
}

}  // namespace detail

/// A rank of a Gloo context.
class Gloo : public TypedFrontEnd<Gloo>, public AsyncOnCommThread<Gloo> {
 public:
  static constexpr const char* name = "gloo";

  /// A rank of the job this process belongs to (runtime::detect_process()). `prefix` separates the
  /// communicators of one job: every rank creates them in the same order with the same prefix.
  explicit Gloo(const std::string& prefix = "world", Options o = Options::from_env())
      : Gloo(runtime::detect_process(), prefix, o) {}

  Gloo(const runtime::ProcessInfo& p, const std::string& prefix, Options o) : Gloo(p, prefix, o, nullptr) {}

  /// The same, over `device` (from device_for(p)) shared with other communicators of this
  /// process, so that one event loop serves them all; null: a device of its own. Share one
  /// only among communicators that are never aborted while their peers go on: in an elastic
  /// run where a rank timed out and aborted its communicator while its peers had moved on, a
  /// shared device's event loop closed a descriptor the process had since reused (its store
  /// connection). bench/README.md, "A new communicator", has what a device of its own costs.
  Gloo(const runtime::ProcessInfo& p, const std::string& prefix, Options o, std::shared_ptr<gloo::transport::Device> device)
      : options_(o), rank_(p.rank), size_(p.world_size), flight_group_(FlightRecorder::instance().group(name, p.rank, p.world_size)) {
    const gloo::transport::tcp::attr attr = attr_for(p);  // a bad STRATA_IFNAME fails even a group of one
    if (size_ == 1) return;  // a group of one needs no context: every collective is local
    connect(p, prefix, device ? std::move(device) : gloo::transport::tcp::CreateDevice(attr));
  }
  Gloo(Gloo&&) = delete;  // the abort state (an atomic, a mutex) and the worker thread stay put
  Gloo& operator=(Gloo&&) = delete;
  ~Gloo() { worker_.stop(); }

  /// A TCP device for process `p`'s communicators: on STRATA_IFNAME's interface, else on the
  /// address the store is reached at.
  static std::shared_ptr<gloo::transport::Device> device_for(const runtime::ProcessInfo& p) {
    return gloo::transport::tcp::CreateDevice(attr_for(p));
  }
  static gloo::transport::tcp::attr attr_for(const runtime::ProcessInfo& p) {
    gloo::transport::tcp::attr attr;
    if (const char* ifname = runtime::detail::env("STRATA_IFNAME")) {
      const std::string names = detail::interface_names();
      if (("," + names + ",").find(std::string(",") + ifname + ",") == std::string::npos &&
          (", " + names + ",").find(std::string(", ") + ifname + ",") == std::string::npos)
        STRATA_THROW(::strata::invalid_argument, "strata.collective.gloo", "STRATA_IFNAME=", ifname,
                     " is not an interface of this host; it has: ", names);
      attr.iface = ifname;
    } else {
      attr.hostname = p.master_addr == "127.0.0.1" || p.master_addr == "localhost" ? "127.0.0.1" : p.master_addr;
      if (p.world_size > 1 && p.launcher == "env") attr.hostname = "127.0.0.1";
    }
    return attr;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::uint64_t sequence() const noexcept { return seq_; }
  /// Rank r's process state (runtime::process_state) when it runs on this host, '?' otherwise.
  char peer_state(int r) const {
    const std::string mine = detail::host_prefix();
    if (r == rank_ || r < 0 || static_cast<std::size_t>(r) >= claims_.size() || claims_[static_cast<std::size_t>(r)].rfind(mine, 0) != 0)
      return '?';
    return runtime::process_state(std::atol(claims_[static_cast<std::size_t>(r)].c_str() + mine.size()));
  }
  /// The underlying Gloo context (null for a group of one), for calling Gloo directly.
  const std::shared_ptr<gloo::rendezvous::Context>& context() const noexcept { return ctx_; }

  // The typed overloads (allreduce, broadcast, allgather, reduce_scatter) come from TypedFrontEnd.
  void broadcast_raw(void* x, std::size_t count, DType dtype, int root) {
    const Fingerprint fp = next(OpKind::broadcast, ReduceOp::Sum, dtype, count, root);
    if (size_ == 1 || count == 0) return;
    if (auto* staging = staging_buffer())
      return on_host(fp, [&] { staging->broadcast(x, count * size_of(dtype), root, options_.timeout, fp.str()); });
    guarded(fp, [&] {  // moved as bytes: Gloo's broadcast does no arithmetic
      gloo::BroadcastOptions o(ctx_);
      o.setTimeout(options_.timeout);
      o.setRoot(root);
      o.setOutput(static_cast<std::uint8_t*>(x), count * size_of(dtype));
      gloo::broadcast(o);
    });
  }
  void allgather_raw(const void* in, void* out, std::size_t count, DType dtype) {
    const Fingerprint fp = next(OpKind::allgather, ReduceOp::Sum, dtype, count, 0);
    const std::size_t bytes = count * size_of(dtype);
    if (bytes == 0) return;
    if (size_ == 1) {
      if (in != out) std::memcpy(out, in, bytes);
      return;
    }
    if (auto* staging = staging_buffer())
      return on_host(fp, [&] { staging->allgather(in, out, bytes, options_.timeout, fp.str()); });
    // In place (`in` is this rank's block of `out`): Gloo copies its input into that block
    // first, so it sends from a copy.
    std::vector<std::uint8_t> own;
    if (in == static_cast<const std::uint8_t*>(out) + bytes * static_cast<std::size_t>(rank_)) {
      own.assign(static_cast<const std::uint8_t*>(in), static_cast<const std::uint8_t*>(in) + bytes);
      in = own.data();
    }
    guarded(fp, [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setTimeout(options_.timeout);
      o.setInput(static_cast<std::uint8_t*>(const_cast<void*>(in)), bytes);
      o.setOutput(static_cast<std::uint8_t*>(out), bytes * static_cast<std::size_t>(size_));
      gloo::allgather(o);
    });
  }
  /// Reduce-scatter as a ring over Gloo's point-to-point buffers: n - 1 steps, each passing one
  /// partial share to the right neighbour; (n - 1) / n of the input crosses the wire, half of
  /// an allreduce. 16-bit floats go through float32, like allreduce_raw.
  void reduce_scatter_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    if (dtype == DType::f16 || dtype == DType::bf16)  // through float32, like allreduce_raw
      return detail::reduce_scatter_through_float32(in, out, count, dtype, size_, [&](const float* full, float* part) {
        reduce_scatter_raw(full, part, count, DType::f32, op);
      });
    const Fingerprint fp = next(OpKind::reduce_scatter, op, dtype, count, 0);
    if (count == 0) return;
    if (size_ == 1) {
      std::memcpy(out, in, count * size_of(dtype));
      return;
    }
    if (auto* staging = staging_buffer())
      return on_host(fp, [&] { staging->reduce_scatter(in, out, count, dtype, op, options_.timeout, fp.str()); });
    detail::visit_collective_dtype(dtype, [&](auto s, auto a) {
      using T = decltype(s);
      if constexpr (std::is_same_v<T, decltype(a)>) {  // 16-bit floats were converted above
        guarded(fp, [&] { ring_reduce_scatter(static_cast<const T*>(in), static_cast<T*>(out), count, op); });
        if (op == ReduceOp::Mean) detail::divide<T>(count, static_cast<T*>(out), size_);
      }
    });
  }
  void barrier() {
    before_blocking();
    const Fingerprint fp = next(OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0);
    if (size_ == 1) return;
    guarded(fp, [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTimeout(options_.timeout);
      gloo::barrier(o);
    });
  }
  /// `count` elements of `dtype` in memory that every rank of this group maps, or an undefined
  /// tensor when the ranks span hosts (or STRATA_SHM=0): an in-place allreduce of it reduces
  /// straight across the ranks' copies (detail::HostSharedBuffers), not through TCP. Collective.
  /// `common`: one region that every rank maps, so the tensor is the same memory on every
  /// rank (an in-place all-reduce of it goes through the transport).
  Tensor shared_buffer(std::int64_t count, DType dtype, bool common = false) {
    return shared_.make(*this, count, dtype, common);
  }
  /// Rank `rank`'s copy of `mine`, a tensor in a shared_buffer of this rank (the same place
  /// in that rank's buffer), readable and writable here.
  Tensor shared_peer(const Tensor& mine, int rank) const { return shared_.peer(mine, rank); }
  /// Whether the ranks share this host's memory (more than one rank, all on this host, and
  /// STRATA_SHM not 0), so that collectives go through it. Collective on its first call.
  bool shares_host() { return size_ > 1 && staging_buffer() != nullptr; }
  /// A barrier of the group through the shared buffer that holds `mine` (not through TCP):
  /// every rank calls it with its own copy.
  void shared_sync(const Tensor& mine) {
    before_blocking();
    const Fingerprint fp = next(OpKind::barrier, ReduceOp::Sum, DType::u8, 0, 0);
    on_host(fp, [&] { shared_.sync(mine, options_.timeout, fp.str()); });
  }

  /// Fails this rank's pending and later collectives with `reason`; callable from any thread.
  /// Its connections close, so a wait in progress here ends now, and the peers' next wait on
  /// this rank fails at once ("peer lost") instead of at its deadline.
  void abort(const std::string& reason) {
    set_aborted(reason.empty() ? "aborted" : reason);
    shared_.abort(reason.empty() ? "aborted" : reason);
    if (!ctx_) return;
    // Shut the connections down (the descriptors stay Gloo's to close): each pair then sees
    // what it sees when a peer's socket fails, and every wait on it ends with an error at once.
    // Gloo's own Pair::close() would leave a wait in progress to its deadline.
    for (const int fd : pair_sockets_) ::shutdown(fd, SHUT_RDWR);
  }

  /// Sums `count` 16-bit floats (`dtype` f16 or bf16) in place with 16 bits per element on
  /// the wire: each partial sum is added in float32 and rounded back (gradient compression;
  /// the plain allreduce of f16/bf16 carries float32 instead and rounds once).
  void allreduce_sum16_raw(void* x, std::size_t count, DType dtype) {
    STRATA_CHECK(dtype == DType::f16 || dtype == DType::bf16, "allreduce_sum16_raw of ", name_of(dtype));
    const Fingerprint fp = next(OpKind::allreduce, ReduceOp::Sum, dtype, count, 0);
    if (count == 0 || size_ == 1) return;
    guarded(fp, [&] {
      gloo::AllreduceOptions o(ctx_);
      o.setTimeout(options_.timeout);
      o.setOutput(static_cast<std::uint16_t*>(x), count);
      if (dtype == DType::f16)
        o.setReduceFunction([](void* r, const void* a, const void* b, std::size_t n) { detail::add16_into<Half>(r, a, b, n); });
      else
        o.setReduceFunction(
            [](void* r, const void* a, const void* b, std::size_t n) { detail::add16_into<BFloat16>(r, a, b, n); });
      gloo::allreduce(o);
    });
  }

  void allreduce_raw(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
    const Fingerprint fp = next(OpKind::allreduce, op, dtype, count, 0);
    if (count == 0) return;
    if (in == out)
      if (auto* shared = shared_.find(out, count * size_of(dtype)))
        return on_host(fp, [&] { shared->allreduce(count, dtype, op, options_.timeout, fp.str()); });
    if (auto* staging = staging_buffer())
      return on_host(fp, [&] { staging->allreduce(in, out, count, dtype, op, options_.timeout, fp.str()); });
    if (in != out) std::memcpy(out, in, count * size_of(dtype));
    detail::visit_collective_dtype(dtype, [&](auto s, auto a) {
      using S = decltype(s);
      using A = decltype(a);
      if constexpr (!std::is_same_v<S, A>) {  // 16-bit floats: accumulate in float32, round once
        std::vector<A> acc(count);
        detail::load<S, A>(count, static_cast<const S*>(out), acc.data());
        reduce_in_place<A>(fp, acc.data(), count, op);
        detail::store<A, S>(count, acc.data(), static_cast<S*>(out));
      } else {
        reduce_in_place<S>(fp, static_cast<S*>(out), count, op);
      }
    });
  }

 private:
  // Meets the other ranks under `prefix` and connects them over `device`.
  void connect(const runtime::ProcessInfo& p, const std::string& prefix, std::shared_ptr<gloo::transport::Device> device) {
    support::require_crypto("Gloo's mesh (each pair's job-token proof)");
    device_ = std::move(device);
    // A file store where the launcher made a private directory; else the job's TCP store.
    rendezvous_ = std::make_shared<detail::Rendezvous>(
        p.rendezvous_dir.empty() ? detail::Rendezvous::tcp(p.master_addr, p.master_port, rank_, prefix, options_.timeout,
                                                                         options_.rendezvous_abandoned)
                                 : detail::Rendezvous::files(p.rendezvous_dir, prefix));
    detail::Rendezvous& rdv = *rendezvous_;
    // A write to the socket of a peer that died must fail as an error naming it, not kill this
    // process with SIGPIPE; left alone if the program installed its own handler.
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    ctx->setTimeout(options_.timeout);
    rdv.claim(rank_);
    // The mesh's nonce, drawn by rank 0, for the proofs its connections give (below).
    const std::string token = runtime::store_protocol::Credentials::from_env().token;
    std::vector<char> nonce;
    if (rank_ == 0) {
      const std::string hex = support::to_hex(support::random_bytes(16));
      nonce.assign(hex.begin(), hex.end());
      rdv.store().set("strata.mesh_nonce", nonce);
    }
    // This rank's build, compared with every other rank's once the mesh stands (RELIABILITY D9).
    const std::string build = runtime::store_protocol::build_fingerprint();
    rdv.store().set("strata.build/" + std::to_string(rank_), std::vector<char>(build.begin(), build.end()));
    const std::vector<int> before = detail::connected_sockets(p.master_port);
    try {
      ctx->connectFullMesh(rdv.store(), device_);
    } catch (const collective_error& e) {  // given up (Options::rendezvous_abandoned): no address is to blame
      throw collective_error(
          strata::detail::error_text("strata.collective.rendezvous", "rank ", rank_, ": rendezvous '", prefix, "' given up: ", e.what()));
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << strata::detail::error_text("strata.collective.rendezvous") << "rank " << rank_ << ": rendezvous '" << prefix << "' at " << rdv.where()
         << " failed (world_size=" << size_;
      try {
        const std::vector<int> missing = rdv.missing(size_);
        os << ", joined=" << size_ - static_cast<int>(missing.size()) << ", missing=[";
        for (std::size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
        os << "]";
      } catch (const std::exception&) {
        os << ", the store is gone: cannot tell who is missing";
      }
      // Where this rank listens: an address another host cannot reach is the usual cause
      // when everyone joined the store but the connections fail.
      const std::string dev = device_->str();
      const auto at = dev.find("addr=[");
      const std::string addr = at == std::string::npos ? dev : dev.substr(at + 6, dev.find(']', at) - at - 6);
      os << "; this rank's connections use " << addr
         << (runtime::detail::env("STRATA_IFNAME") ? " (STRATA_IFNAME=" + std::string(runtime::detail::env("STRATA_IFNAME")) + ")"
                                                   : std::string(" (no STRATA_IFNAME)"))
         << ": the other ranks' hosts must reach it, else set STRATA_IFNAME to an interface they share): " << e.what();
      throw collective_error(os.str());
    }
    // Every rank runs the same build, and every connection proves it belongs to the job,
    // before any data moves over the mesh.
    std::vector<int> skewed;
    std::string theirs;
    for (int r = 0; r < size_; ++r) {
      const std::vector<char> b = rdv.store().get("strata.build/" + std::to_string(r));
      if (std::string(b.begin(), b.end()) != build) {
        skewed.push_back(r);
        theirs.assign(b.begin(), b.end());
      }
    }
    if (!skewed.empty()) {
      std::ostringstream os;
      for (std::size_t i = 0; i < skewed.size(); ++i) os << (i ? ", " : "") << skewed[i];
      STRATA_THROW(collective_error, "strata.collective.rendezvous", "rank ", rank_, ": rank(s) ", os.str(), " of rendezvous '",
                   prefix, "' run another strata build: '", theirs, "' vs this rank's '", build,
                   "': every process of the job must run the same strata build");
    }
    try {
      if (rank_ != 0) nonce = rdv.store().get("strata.mesh_nonce");
      if (const std::vector<int> bad = detail::peers_without_proof(ctx, token, std::string(nonce.begin(), nonce.end()), options_.timeout);
          !bad.empty()) {
        std::ostringstream os;
        for (std::size_t i = 0; i < bad.size(); ++i) os << (i ? ", " : "") << bad[i];
        STRATA_THROW(collective_error, "strata.collective.rendezvous", "rank ", rank_, ": the connections from rank(s) ", os.str(),
                     " of rendezvous '", prefix, "' did not prove they belong to this job: a process outside the job holds them, "
                     "or those ranks were given another STRATA_JOB_TOKEN");
      }
    } catch (const gloo::Exception& e) {
      STRATA_THROW(collective_error, "strata.collective.rendezvous", "rank ", rank_, ": the connections of rendezvous '", prefix,
                   "' did not prove they belong to this job within ", options_.timeout.count(), " ms: ", e.what());
    }
    claims_ = rdv.claims(size_);  // every rank claimed before publishing its address
    // This communicator's connections: the sockets the full mesh opened (for abort()).
    const std::vector<int> after = detail::connected_sockets(p.master_port);
    std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(pair_sockets_));
    ctx_ = std::move(ctx);
  }

  friend class TypedFrontEnd<Gloo>;
  friend class AsyncOnCommThread<Gloo>;
  detail::AsyncWorker& comm_thread() noexcept { return worker_; }
  void before_blocking() { worker_.drain(); }

  template <class T>
  void reduce_in_place(const Fingerprint& fp, T* x, std::size_t count, ReduceOp op) {
    if (size_ > 1)
      guarded(fp, [&] {
        gloo::AllreduceOptions o(ctx_);
        o.setTimeout(options_.timeout);
        o.setOutput(x, count);
        o.setReduceFunction([op](void* r, const void* a, const void* b, std::size_t n) {
          detail::gloo_reduce<T>(op, r, a, b, n);
        });
        gloo::allreduce(o);
      });
    if (op == ReduceOp::Mean) detail::divide<T>(count, x, size_);
  }

  /// Step k sends the partial of share (rank - k - 1) to the right and receives the partial of
  /// share (rank - k - 2) from the left, adding this rank's input to it; the last step's share
  /// is this rank's own, received straight into `out`. Two scratch shares alternate.
  template <class T>
  void ring_reduce_scatter(const T* in, T* out, std::size_t count, ReduceOp op) {
    const int n = size_;
    const std::size_t bytes = count * sizeof(T);
    scratch_.resize(std::max(scratch_.size(), (2 * bytes + sizeof(double) - 1) / sizeof(double)));
    T* part[2] = {reinterpret_cast<T*>(scratch_.data()), reinterpret_cast<T*>(scratch_.data()) + count};
    auto input = ctx_->createUnboundBuffer(const_cast<T*>(in), bytes * static_cast<std::size_t>(n));
    auto parts = ctx_->createUnboundBuffer(part[0], 2 * bytes);
    auto result = ctx_->createUnboundBuffer(out, bytes);
    const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    const int right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
    auto share = [&](int k) { return static_cast<std::size_t>((rank_ - k + 2 * n) % n); };
    for (int step = 0; step + 1 < n; ++step) {
      const bool last = step + 2 == n;
      const std::size_t into = static_cast<std::size_t>(step % 2) * bytes;
      if (last)
        result->recv(left, slot, 0, bytes);
      else
        parts->recv(left, slot, into, bytes);
      if (step == 0)
        input->send(right, slot, share(1) * bytes, bytes);
      else
        parts->send(right, slot, static_cast<std::size_t>((step + 1) % 2) * bytes, bytes);
      gloo::transport::UnboundBuffer& received = last ? *result : *parts;
      if (!received.waitRecv(options_.timeout)) throw collective_error("receive aborted");
      if (!(step == 0 ? *input : *parts).waitSend(options_.timeout)) throw collective_error("send aborted");
      detail::combine<T>(op, count, last ? out : part[step % 2], in + share(step + 2) * count);
    }
  }

  Fingerprint next(OpKind kind, ReduceOp op, DType dtype, std::size_t count, int root) {
    if (aborted_flag_.load(std::memory_order_acquire))
      STRATA_THROW(collective_error, "strata.collective.aborted", std::string(name_of(kind)), " #", seq_, " on rank ",
                   rank_, ": ", aborted_reason());
    Fingerprint fp{kind, op, dtype, count, root, seq_++};
    if (options_.check_fingerprints && size_ > 1) check_fingerprint(fp);
    return fp;
  }

  /// The staging buffer for collectives through shared memory, or null. Made (collectively)
  /// at the first call; the collectives that make it do not count in the sequence numbers,
  /// which stay those of the caller's calls.
  detail::HostSharedBuffer* staging_buffer() { return shared_.staging(*this, seq_); }

  /// Runs a collective through shared memory (ranks on one host); a failure there fails this
  /// communicator, as a failed Gloo call does.
  template <class Call>
  void on_host(const Fingerprint& fp, Call&& call) {
    const FlightRecorder::Scope recorded(flight_group_, fp);
    const detail::WaitTimer waiting;  // the rank waits on the others meanwhile
    try {
      call();
    } catch (const std::exception& e) {
      if (aborted_flag_.load(std::memory_order_acquire))
        STRATA_THROW(collective_error, "strata.collective.aborted", fp.str(), " on rank ", rank_, ": ",
                     aborted_reason());
      set_aborted(e.what());
      if (dynamic_cast<const timeout_error*>(&e) != nullptr)  // the message names this rank's flight record
        throw timeout_error(std::string(e.what()) + "; flight recorder: " + FlightRecorder::instance().path());
      throw;
    }
  }

  /// Runs a Gloo call; its exceptions become strata errors naming the collective.
  template <class Call>
  void guarded(const Fingerprint& fp, Call&& call) {
    const FlightRecorder::Scope recorded(flight_group_, fp);
    const detail::WaitTimer waiting;  // the rank waits on the others meanwhile
    try {
      call();
    } catch (const std::exception&) {
      if (aborted_flag_.load(std::memory_order_acquire))  // abort() closed the connections under it
        STRATA_THROW(collective_error, "strata.collective.aborted", fp.str(), " on rank ", rank_, ": ",
                     aborted_reason());
      rethrow_as_strata_error(fp);
    }
  }
  [[noreturn]] void rethrow_as_strata_error(const Fingerprint& fp) {
    try {
      throw;
    } catch (const gloo::IoException& e) {
      const std::string what = e.what();
      const bool timed_out = what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
      // Name the peer behind it where this host can tell: a rank that is gone (connection
      // reset) or one that is stopped (the timeout of a rank that never arrives).
      std::string blame;
      const std::vector<int> ranks =
          timed_out ? detail::local_ranks_in_state(claims_, rank_, "Tt", 1) : detail::local_ranks_in_state(claims_, rank_, "XZ", 20);
      for (std::size_t i = 0; i < ranks.size(); ++i)
        blame += (i ? ", rank " : timed_out ? "did not arrive: rank " : "peer lost: rank ") + std::to_string(ranks[i]);
      if (!blame.empty())
        blame += timed_out ? (ranks.size() == 1 ? " is stopped (SIGSTOP or a debugger); " : " are stopped (SIGSTOP or a debugger); ")
                           : (ranks.size() == 1 ? " is no longer running; " : " are no longer running; ");
      else if (timed_out)
        blame = census(fp);
      else
        mark_reached(fp);  // for the census of ranks still waiting: this one was here

      const std::string msg = strata::detail::error_text(timed_out ? "strata.collective.timeout" : "strata.collective.peer",
                                                         fp.str(), " on rank ", rank_, " of ", size_, ": ", blame, what,
                                                         "; flight recorder: ", FlightRecorder::instance().path());
      set_aborted(msg);
      if (timed_out) throw timeout_error(msg);
      throw collective_error(msg);
    } catch (const std::exception& e) {
      const std::string msg = strata::detail::error_text("strata.collective.gloo", fp.str(), " on rank ", rank_, ": ",
                                                         e.what());
      set_aborted(msg);
      throw collective_error(msg);
    }
  }

  /// After a deadline with no stopped or lost peer to blame: every rank that times out in
  /// this collective says so through the store, and the ranks that have not said so within a
  /// moment are named — running, but never there (a skipped call, or busy elsewhere).
  /// Records in the store that this rank reached collective `fp` (its census entry).
  void mark_reached(const Fingerprint& fp) noexcept {
    try {
      if (rendezvous_) rendezvous_->mark(std::to_string(fp.seq) + "/" + std::to_string(rank_));
    } catch (const std::exception&) {  // the store is gone: the others' census cannot ask it either
    }
  }
  std::string census(const Fingerprint& fp) {
    try {
      const std::string at = std::to_string(fp.seq) + "/";
      mark_reached(fp);
      const auto until = std::chrono::steady_clock::now() +
                         std::min<std::chrono::milliseconds>(options_.timeout / 2, std::chrono::milliseconds(1000));
      std::vector<int> absent;
      do {
        absent.clear();
        for (int r = 0; r < size_; ++r)
          if (r != rank_ && !rendezvous_->marked(at + std::to_string(r))) absent.push_back(r);
        if (absent.empty()) return "every rank reached it; ";
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (std::chrono::steady_clock::now() < until);
      std::string out = "did not arrive: rank";
      for (std::size_t i = 0; i < absent.size(); ++i) out += (i ? ", " : absent.size() > 1 ? "s " : " ") + std::to_string(absent[i]);
      return out + (absent.size() == 1 ? " is" : " are") + " running but did not reach it (skipped, or busy elsewhere); ";
    } catch (const std::exception&) {  // the store is gone too: nothing more to tell
      return {};
    }
  }

  /// Debug mode: every rank's fingerprint, gathered and compared before the collective runs.
  void check_fingerprint(const Fingerprint& fp) {
    std::uint64_t mine[kCheckWords];
    pack_checked_call(fp, FlightRecorder::current_label(), mine);
    std::vector<std::uint64_t> all(kCheckWords * static_cast<std::size_t>(size_));
    guarded(fp, [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setTimeout(options_.timeout);
      o.setInput(mine, kCheckWords);
      o.setOutput(all.data(), all.size());
      gloo::allgather(o);
    });
    if (auto msg = fingerprint_mismatch(rank_, fp, all.data(), size_); !msg.empty()) throw collective_error(msg);
  }

  Options options_;
  int rank_ = 0, size_ = 1;
  int flight_group_ = 0;  // this communicator's group in the FlightRecorder
  std::uint64_t seq_ = 0;
  void set_aborted(const std::string& why) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.empty()) {  // the first reason is the root cause
      aborted_ = why;
      FlightRecorder::instance().dump(why.c_str());
    }
    aborted_flag_.store(true, std::memory_order_release);
  }
  std::string aborted_reason() const {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    return aborted_;
  }

  std::atomic<bool> aborted_flag_{false};  // checked before each collective; the reason under the mutex
  mutable std::mutex abort_mutex_;
  std::string aborted_;
  std::vector<std::string> claims_;  // every rank's "host:pid" (to name a lost or stopped peer)
  std::shared_ptr<detail::Rendezvous> rendezvous_;  // kept for the census after a deadline
  std::vector<int> pair_sockets_;                   // the connections to the peers, for abort()
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::vector<double> scratch_;  // reduce-scatter's two partial shares (grow-only; double-aligned)
  detail::HostSharedBuffers shared_;
  detail::AsyncWorker worker_;
  static constexpr std::uint8_t kReduceScatterSlotPrefix = 0x40;  // clear of Gloo's own (0x01-0x08)
};

}  // namespace strata::collective

template <>
inline constexpr bool strata::enable_collective<strata::collective::Gloo> = true;
template <>
inline constexpr bool strata::collective::enable_raw_collective<strata::collective::Gloo> = true;
template <>
inline constexpr bool strata::collective::enable_wire_compression<strata::collective::Gloo> = true;
template <>
inline constexpr bool strata::collective::enable_host_shared_memory<strata::collective::Gloo> = true;

#endif  // STRATA_HAS_GLOO

/// \file
/// ps::Transport<collective::Mpi>: the messages of a ParameterServerStrategy over MPI
/// point-to-point on a communicator of their own, plus the two collectives the strategy needs
/// (the whole job's, and the workers' among themselves). Nothing here spins: a rank waiting
/// for a message tests and sleeps (ps::Backoff), so three ranks share two cores.
#pragma once

#include <strata/config.hpp>

#if !STRATA_HAS_MPI
#error "ParameterServerStrategy<collective::Mpi> needs MPI: configure strata with -Dmpi=enabled (Debian: libopenmpi-dev openmpi-bin), or by hand: mpicxx (or -lmpi) and -DSTRATA_HAS_MPI=1"
#else

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/collective/mpi.hpp>
#include <strata/strategy/parameter_server/backoff.hpp>
#include <strata/strategy/parameter_server/roles.hpp>
#include <strata/strategy/parameter_server/transport.hpp>

namespace strata::ps {

template <>
class Transport<collective::Mpi> {
 public:
  using Request = MPI_Request;
  /// MPI moves a large message only while a rank is inside MPI calls: poll this long after activity.
  static constexpr std::chrono::microseconds poll_window = Backoff::kActiveWindow;

  /// A message that arrived and waits to be received.
  struct Message {
    int source = -1;  ///< world rank
    int tag = 0;
    std::size_t bytes = 0;
    MPI_Message handle = MPI_MESSAGE_NULL;
  };

  /// Joins the job (MPI_COMM_WORLD) with `requested` servers (0: from the environment).
  explicit Transport(int requested_servers, collective::Options o = collective::Options::from_env())
      : world_(MPI_COMM_WORLD, o), roles_(Roles::of(world_.size(), requested_servers)), options_(o) {
    collective::detail::mpi_check(MPI_Comm_dup(world_.comm(), &p2p_), "MPI_Comm_dup");
    MPI_Comm split = MPI_COMM_NULL;
    collective::detail::mpi_check(MPI_Comm_split(world_.comm(), is_server() ? 0 : 1, world_.rank(), &split),
                                  "MPI_Comm_split");
    group_ = std::make_unique<collective::Mpi>(split, o);
    MPI_Comm_free(&split);
  }
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport() { collective::detail::free_communicator(p2p_); }

  const Roles& roles() const noexcept { return roles_; }
  int rank() const noexcept { return world_.rank(); }
  bool is_server() const { return roles_.is_server(world_.rank()); }
  /// Every rank of the job.
  collective::Mpi& world() noexcept { return world_; }
  /// The ranks of this rank's role (the workers among themselves, or the servers).
  collective::Mpi& group() noexcept { return *group_; }
  std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }
  /// Rank r's process state when it shares this host ('?' otherwise): names a stopped or gone peer.
  char peer_state(int r) const { return world_.peer_state(r); }

  Request isend(const void* data, std::size_t bytes, int to, int tag) {
    Request r = MPI_REQUEST_NULL;
    collective::detail::mpi_check(MPI_Isend(data, count_of(bytes), MPI_BYTE, to, tag, p2p_, &r), "MPI_Isend");
    return r;
  }
  Request irecv(void* data, std::size_t bytes, int from, int tag) {
    Request r = MPI_REQUEST_NULL;
    collective::detail::mpi_check(MPI_Irecv(data, count_of(bytes), MPI_BYTE, from, tag, p2p_, &r), "MPI_Irecv");
    return r;
  }
  /// True (and `m` filled) when a message from any rank has arrived; never blocks.
  bool probe(Message& m) {
    int flag = 0;
    MPI_Status st;
    collective::detail::mpi_check(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, p2p_, &flag, &m.handle, &st),
                                  "MPI_Improbe");
    if (!flag) return false;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    m.source = st.MPI_SOURCE;
    m.tag = st.MPI_TAG;
    m.bytes = static_cast<std::size_t>(count);
    return true;
  }
  /// Receives the probed message `m` into `data` (exactly m.bytes).
  void receive(Message& m, void* data) {
    collective::detail::mpi_check(MPI_Mrecv(data, count_of(m.bytes), MPI_BYTE, &m.handle, MPI_STATUS_IGNORE),
                                  "MPI_Mrecv");
  }
  /// True when `r` has completed (it becomes null).
  bool test(Request& r) {
    int flag = 0;
    collective::detail::mpi_check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }
  /// True when every request has completed (completed ones become null).
  bool test_all(std::span<Request> rs) {
    if (rs.empty()) return true;
    int flag = 0;
    collective::detail::mpi_check(MPI_Testall(static_cast<int>(rs.size()), rs.data(), &flag, MPI_STATUSES_IGNORE),
                                  "MPI_Testall");
    return flag != 0;
  }
  /// Completes every request (moving `bytes` in all), polling then sleeping (ps::Backoff);
  /// past `deadline` calls on_timeout(why) (which does not return).
  /// (If on_timeout returns, wait_all returns false with the requests still pending.)
  template <class OnTimeout>
  bool wait_all(std::span<Request> rs, std::chrono::steady_clock::time_point deadline, OnTimeout&& on_timeout,
                std::size_t bytes = 0) {
    const auto start = std::chrono::steady_clock::now();
    Backoff backoff(bytes, poll_window);
    while (!test_all(rs)) {
      if (backoff.pause() && std::chrono::steady_clock::now() > deadline) {
        on_timeout("not complete after " +
                   std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) + " s");
        return false;
      }
    }
    return true;
  }
  /// Ends the job with `message` (every rank stops; mpirun exits non-zero).
  [[noreturn]] void abort(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 124);
    std::abort();
  }

 private:
  static int count_of(std::size_t bytes) {
    STRATA_CHECK(bytes <= static_cast<std::size_t>(INT_MAX), "ParameterServerStrategy<Mpi>: a partition of ", bytes,
                 " bytes is over MPI's 2^31-1 per message; lower partition_bytes or add servers");
    return static_cast<int>(bytes);
  }

  collective::Mpi world_;
  Roles roles_;
  collective::Options options_;
  std::unique_ptr<collective::Mpi> group_;
  MPI_Comm p2p_ = MPI_COMM_NULL;
};

template <>
inline constexpr bool has_transport<collective::Mpi> = true;

}  // namespace strata::ps

#endif  // STRATA_HAS_MPI

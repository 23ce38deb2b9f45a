/// \file
/// ps::Transport<C>: how servers and workers of a ParameterServerStrategy<C> exchange
/// messages, specialised per collective (mpi_transport.hpp, gloo_transport.hpp), and the
/// ps::MessageTransport concept that names everything the strategy uses of one: its roles and
/// rank, the job's and the role group's collectives, the deadline, a peer's state, isend/irecv
/// of raw bytes -> Request, probe/receive of a message from any rank, test/test_all/wait_all,
/// and abort(message). A collective opts in with has_transport<C>; the strategy requires
/// ps::TransportOf<C>: the trait, and Transport<C> a MessageTransport. ps::AdmitsWorkers<T>
/// names the transports that take workers into a running job.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include <strata/collective/capabilities.hpp>  // RawCollective
#include <strata/strategy/parameter_server/roles.hpp>

namespace strata::ps {

template <class C>
class Transport;

/// Opt-in trait: true for a collective that has a Transport in this build.
template <class C>
inline constexpr bool has_transport = false;

namespace detail {
/// What wait_all calls on a failure or at its deadline (a concept check's stand-in).
using OnTimeout = void (*)(const std::string& why);
}  // namespace detail

/// Messages between the ranks of a parameter-server job.
template <class T>
concept MessageTransport = requires(T& t, const T& ct, typename T::Message& m, typename T::Request& r,
                                    std::span<typename T::Request> rs, const void* in, void* out, std::size_t bytes,
                                    int peer, int tag, std::chrono::steady_clock::time_point deadline,
                                    detail::OnTimeout on_timeout) {
  { T::poll_window } -> std::convertible_to<std::chrono::microseconds>;
  { ct.roles() } -> std::convertible_to<const Roles&>;
  { ct.rank() } -> std::same_as<int>;
  { ct.is_server() } -> std::same_as<bool>;
  requires collective::RawCollective<std::remove_cvref_t<decltype(t.world())>>;
  requires collective::RawCollective<std::remove_cvref_t<decltype(t.group())>>;
  { ct.timeout() } -> std::convertible_to<std::chrono::milliseconds>;
  { ct.peer_state(peer) } -> std::same_as<char>;
  { t.isend(in, bytes, peer, tag) } -> std::same_as<typename T::Request>;
  { t.irecv(out, bytes, peer, tag) } -> std::same_as<typename T::Request>;
  { t.probe(m) } -> std::same_as<bool>;
  t.receive(m, out);
  { t.test(r) } -> std::same_as<bool>;
  { t.test_all(rs) } -> std::same_as<bool>;
  { t.wait_all(rs, deadline, on_timeout, bytes) } -> std::same_as<bool>;
  t.abort(std::string());
};

/// A collective whose Transport carries a ParameterServerStrategy.
template <class C>
concept TransportOf = has_transport<C> && MessageTransport<Transport<C>>;

/// Opt-in trait: a transport whose job takes in workers while it runs (Gloo's, whose ranks
/// meet through a store; an MPI job's ranks are fixed at launch).
template <class T>
inline constexpr bool enable_admits_workers = false;

/// A transport that admits workers into a running job: admit_joiners() (a server: listen for
/// them), admit(rank) (a server: the joiner `rank` takes part from now on), joined() (this
/// process joined a running job rather than starting with it).
template <class T>
concept AdmitsWorkers = MessageTransport<T> && enable_admits_workers<T> && requires(T& t, const T& ct, int r) {
  t.admit_joiners();
  t.admit(r);
  { ct.joined() } -> std::same_as<bool>;
};

}  // namespace strata::ps

/// \file
/// ps::Transport<C>: how servers and workers of a ParameterServerStrategy<C> exchange
/// messages, specialised per collective (mpi_transport.hpp). What the strategy uses of it:
///   roles(), rank(), is_server(), world() and group() (collectives of the job and of this
///   rank's role), timeout(), peer_state(rank), isend/irecv -> Request, probe/receive of a
///   message from any rank, test/test_all/wait_all, abort(message).
#pragma once

namespace strata::ps {

template <class C>
class Transport;

/// True for a collective that has a Transport in this build.
template <class C>
inline constexpr bool has_transport = false;

}  // namespace strata::ps

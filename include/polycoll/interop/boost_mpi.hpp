#pragma once
/// @file interop/boost_mpi.hpp
/// Mpi from and to boost::mpi::communicator. `from_boost` borrows the
/// communicator (Boost keeps owning it; it must outlive the Mpi), `to_boost`
/// attaches a Boost view to the Mpi's MPI_Comm (the Mpi keeps owning it).
/// Works with a boost::mpi::environment or a polycoll::mpi::Environment,
/// whichever initialised MPI first (the other then owns nothing).

#include <boost/mpi/communicator.hpp>

#include <polycoll/backends/mpi.hpp>

namespace polycoll::mpi {

/// An Mpi over `comm`, borrowed (see BasicMpi::borrow).
template <class Policies = DefaultPolicies>
[[nodiscard]] Result<BasicMpi<Policies>> from_boost(const boost::mpi::communicator& comm, Options options = {}) {
  return BasicMpi<Policies>::borrow(static_cast<MPI_Comm>(comm), options);
}

/// A boost::mpi::communicator over `comm`'s MPI_Comm, not owning it: valid
/// while `comm` lives. Traffic through it shares polycoll's tag space.
template <class Policies>
[[nodiscard]] boost::mpi::communicator to_boost(const BasicMpi<Policies>& comm) {
  return boost::mpi::communicator(comm.native(), boost::mpi::comm_attach);
}

}  // namespace polycoll::mpi

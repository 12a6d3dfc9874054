#pragma once
/// @file polycoll.hpp
/// Umbrella header: the core and exactly the backends config.hpp enables.
/// NoOp and Threads are always there; Mpi when POLYCOLL_HAS_MPI, Nccl when
/// POLYCOLL_HAS_NCCL, the Boost.MPI interop when POLYCOLL_HAS_BOOST_MPI. An
/// enabled backend whose native header is not on the include path is a
/// compile error naming it (a TU that needs fewer backends includes their
/// own headers: noop.hpp, threads.hpp, mpi.hpp, nccl.hpp).

#include <polycoll/detail/core.hpp>

#include <polycoll/noop.hpp>
#include <polycoll/threads.hpp>

#if POLYCOLL_HAS_MPI
#include <polycoll/mpi.hpp>
#if POLYCOLL_HAS_BOOST_MPI
#if defined(__has_include)
#if !__has_include(<boost/mpi/communicator.hpp>)
#error "polycoll: configured with Boost.MPI (POLYCOLL_HAS_BOOST_MPI), but <boost/mpi/communicator.hpp> is not on the include path: compile with Boost's flags (pkg-config polycoll and CMake polycoll::polycoll carry them)"
#endif
#endif
#include <polycoll/interop/boost_mpi.hpp>
#endif
#endif

#if POLYCOLL_HAS_NCCL
#include <polycoll/nccl.hpp>
#endif

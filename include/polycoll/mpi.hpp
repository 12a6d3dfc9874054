#pragma once
/// @file mpi.hpp
/// The core and the Mpi backend only. Needs a polycoll configured with MPI
/// and MPI's include path (pkg-config polycoll and CMake polycoll::polycoll
/// carry it); either missing is a compile error that says so, not a backend
/// silently left out.

#include <polycoll/detail/core.hpp>

#if !POLYCOLL_HAS_MPI
#error "polycoll: <polycoll/mpi.hpp> needs polycoll configured with MPI (POLYCOLL_HAS_MPI is 0 in <polycoll/config.hpp>)"
#elif defined(__has_include)
#if !__has_include(<mpi.h>)
#error "polycoll: configured with MPI (POLYCOLL_HAS_MPI), but <mpi.h> is not on the include path: compile with MPI's flags (pkg-config polycoll and CMake polycoll::polycoll carry them), or include <polycoll/threads.hpp> or <polycoll/noop.hpp> instead of the MPI-enabled headers"
#endif
#endif

#include <polycoll/backends/mpi.hpp>

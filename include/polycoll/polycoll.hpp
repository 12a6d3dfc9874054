#pragma once
/// @file polycoll.hpp
/// Umbrella header: the core and every backend enabled in config.hpp.

#include <polycoll/config.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/log.hpp>
#include <polycoll/numeric.hpp>
#include <polycoll/reduce_op.hpp>
#include <polycoll/stream_sync.hpp>

#include <polycoll/backends/noop.hpp>
#include <polycoll/backends/threads.hpp>

// mpi.h must be on the include path too (nvcc checks of the umbrella may lack it).
#if POLYCOLL_HAS_MPI && __has_include(<mpi.h>)
#include <polycoll/backends/mpi.hpp>
#if POLYCOLL_HAS_BOOST_MPI && __has_include(<boost/mpi/communicator.hpp>)
#include <polycoll/interop/boost_mpi.hpp>
#endif
#endif

// nccl.h (and cuda_runtime.h) must be on the include path too.
#if POLYCOLL_HAS_NCCL && __has_include(<nccl.h>)
#include <polycoll/backends/nccl.hpp>
#endif

#pragma once
/// @file detail/core.hpp
/// The backend-independent part of polycoll that every public entry header
/// (polycoll.hpp and the per-backend noop.hpp, threads.hpp, mpi.hpp,
/// nccl.hpp) includes: one list, so the entry headers offer the same names.

#include <polycoll/config.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/flight_record.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/log.hpp>
#include <polycoll/numeric.hpp>
#include <polycoll/reduce_op.hpp>
#include <polycoll/stream_sync.hpp>

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

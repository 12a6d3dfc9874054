#pragma once
/// @file noop.hpp
/// The core and the NoOp backend (world 1) only: a TU that uses NoOp alone
/// includes this and compiles no other backend.

#include <polycoll/detail/core.hpp>

#include <polycoll/backends/noop.hpp>

#pragma once
/// @file threads.hpp
/// The core and the Threads backend (ranks as threads of one process) only:
/// a TU that uses Threads alone includes this and compiles no other backend.

#include <polycoll/detail/core.hpp>

#include <polycoll/backends/threads.hpp>

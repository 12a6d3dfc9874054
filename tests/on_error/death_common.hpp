#pragma once
// What the death-test programs (death.cpp, mpi_death.cpp, nccl_death.cpp)
// share: the aborting Options and the outcome of an error that came back.

#include <polycoll/communicator.hpp>
#include <polycoll/error.hpp>

#include <cstdio>

namespace death {

/// Options with on_error = abort.
inline polycoll::Options aborting() {
  polycoll::Options o;
  o.on_error = polycoll::OnError::abort;
  return o;
}

/// The outcome when the error came back (the default, or an error the library
/// does not return to the caller): "RETURNED: <message>" and 0; a success is
/// "UNEXPECTED" and 1.
inline int returned(const polycoll::Status& s) {
  if (s) {
    std::printf("UNEXPECTED: the call succeeded\n");
    return 1;
  }
  std::printf("RETURNED: %s\n", s.error().message.c_str());
  return 0;
}

}  // namespace death

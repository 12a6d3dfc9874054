// Helpers shared by the Catch2-based Mpi test programs (mpi_test.cpp,
// reliability.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <polycoll/backends/mpi.hpp>

#include <string>
#include <utility>

namespace polycoll::test {

inline bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// An Mpi over MPI_COMM_WORLD; the test stops (with the error) if there is none.
inline Mpi world(Options o = {}) {
  auto w = Mpi::world(o);
  INFO((w ? std::string() : w.error().message));
  REQUIRE(w.has_value());
  return std::move(*w);
}

}  // namespace polycoll::test

// The one Catch2 main of every suite. Built with POLYCOLL_TEST_MPI=1 it is
// MPI-aware: every rank runs the session, ranks other than 0 write their report
// to a private buffer that is printed only when that rank failed, failure
// counts are reduced over ranks, and every rank exits with the total, so
// mpiexec and meson see one verdict. Without MPI it is a plain Catch2 main.
// Catch2's implementation is in catch_impl.cpp, compiled once.
#include "catch_run.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#if defined(POLYCOLL_TEST_MPI) && POLYCOLL_TEST_MPI
#include <mpi.h>
#endif

int main(int argc, char** argv) {
#if defined(POLYCOLL_TEST_MPI) && POLYCOLL_TEST_MPI
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string report_file;
  if (rank != 0) {
    report_file = "polycoll-test-rank" + std::to_string(rank) + "-" + std::to_string(::getpid()) + ".log";
  }
  bool bad_command_line = false;
  const int failed =
      polycoll::test::run_catch(argc, argv, rank != 0 ? report_file.c_str() : nullptr, &bad_command_line);
  if (bad_command_line) {
    MPI_Finalize();
    return failed;
  }
  int total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank != 0) {
    if (failed != 0) {
      std::ifstream in(report_file);
      std::stringstream ss;
      ss << in.rdbuf();
      std::cerr << "---- rank " << rank << " of " << size << " failed " << failed << " assertion(s):\n" << ss.str();
    }
    std::remove(report_file.c_str());
  } else if (total != 0) {
    std::cerr << "polycoll tests: " << total << " failure(s) summed over " << size << " rank(s)\n";
  }
  MPI_Finalize();
  return total > 255 ? 255 : total;
#else
  bool bad_command_line = false;
  const int failed = polycoll::test::run_catch(argc, argv, nullptr, &bad_command_line);
  return failed > 255 ? 255 : failed;
#endif
}

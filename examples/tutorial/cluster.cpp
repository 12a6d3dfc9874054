// examples/tutorial/cluster.cpp: one rank per MPI process, on one machine or many.
#include <polycoll/mpi.hpp>

#include <cstdio>

#include "stats.hpp"

int main(int argc, char** argv) {
  polycoll::mpi::Environment env(argc, argv);  // MPI_Init_thread now, MPI_Finalize at the end
  auto comm = polycoll::Mpi::world();
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return 1;
  }
  const auto data = slice(comm->rank(), 1000);
  const auto stats = global_stats(*comm, data);
  if (!stats) {
    std::fprintf(stderr, "%s\n", stats.error().message.c_str());
    return 1;
  }
  if (comm->rank() == 0) {
    std::printf("%g values on %zu ranks: mean %g, stddev %g\n", stats->count, comm->world_size(), stats->mean,
                stats->stddev);
  }
  return plausible(*stats) ? 0 : 1;
}

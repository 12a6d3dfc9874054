// The heat equation on the Mpi backend, one rank per MPI process:
//   mpiexec -n 4 heat_mpi [nx ny iterations]
// Every rank checks the gathered grid against the serial answer; the exit
// status is non-zero on every rank when any rank's check fails.
#include <polycoll/mpi.hpp>

#include <cstdio>

#include "heat.hpp"

int main(int argc, char** argv) {
  polycoll::mpi::Environment env(argc, argv);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().error().message.c_str());
    return 1;
  }
  const auto params = heat::parse_args(argc, argv, 1);
  if (!params) {
    std::fprintf(stderr, "%s\n", params.error().message.c_str());
    return 2;
  }
  auto comm = polycoll::Mpi::world();
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return 1;
  }
  auto r = heat::solve(*comm, *params);
  if (!r) std::fprintf(stderr, "%s\n", r.error().message.c_str());
  int ok = r && heat::check(*r, *params, comm->rank(), comm->world_size(), "mpi") ? 1 : 0;
  // Every rank learns whether every rank passed (min over ranks).
  if (auto s = comm->all_reduce(std::span<int>(&ok, 1), polycoll::min); !s || !comm->sync()) return 1;
  return ok == 1 ? 0 : 1;
}

// Data-parallel training on the Mpi backend: `mpiexec -n 4 train_mpi [--op avg|sum]`.
#include <polycoll/mpi.hpp>

#include <cstdio>

#include "train.hpp"

int main(int argc, char** argv) {
  polycoll::mpi::Environment env(argc, argv);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().error().message.c_str());
    return 1;
  }
  const auto params = train::parse_args(argc, argv, 1);
  if (!params) {
    std::fprintf(stderr, "%s\n", params.error().message.c_str());
    return 2;
  }
  auto comm = polycoll::Mpi::world();
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return 1;
  }
  const std::vector<double> want = train::reference(*params);
  train::HostExchange ex(*comm, params->features, params->op);
  auto r = train::run(*comm, ex, *params);
  if (!r) std::fprintf(stderr, "%s\n", r.error().message.c_str());
  int ok = r && train::check(*r, want, *params, comm->rank(), comm->world_size(), "mpi") ? 1 : 0;
  if (auto s = comm->all_reduce(std::span<int>(&ok, 1), polycoll::min); !s || !comm->sync()) return 1;
  return ok == 1 ? 0 : 1;
}

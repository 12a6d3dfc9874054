// Out-of-place all_reduce on Mpi at 2 ranks: polycoll's path (MPI_Allreduce
// (send, recv) where MPI's own all_reduce runs; a copy of send into recv,
// then the in-place 2-rank algorithm, where one of those runs) against the
// native MPI_Allreduce(send, recv) on the same communicator, and against
// polycoll's in-place call. f32 sum, sizes 4 B to 64 MiB. Prints, per size,
// the slower rank's mean time per call in microseconds. docs/mpi.md has the
// figures and the command.
//
//   mpiexec.mpich -n 2 build/benchmarks/mpi_all_reduce_out_of_place
#include <polycoll/backends/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

namespace {

template <class F>
double mean_us(MPI_Comm comm, std::size_t bytes, F&& call) {
  const int rounds = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / std::max<std::size_t>(bytes, 4096), 20, 2000));
  for (int i = 0; i < 5; ++i) call();
  MPI_Barrier(comm);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) call();
  const double mine = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / rounds;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  polycoll::mpi::Environment env(argc, argv);
  auto made = polycoll::Mpi::world();
  if (!made) {
    std::fprintf(stderr, "%s\n", made.error().message.c_str());
    return 1;
  }
  polycoll::Mpi& comm = *made;
  const bool root = comm.rank() == 0;
  if (root) std::printf("%12s %14s %14s %14s\n", "bytes", "polycoll_oop", "native_oop", "polycoll_inpl");
  for (std::size_t bytes = 4; bytes <= (std::size_t{64} << 20); bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> send(n, 1.0f), recv(n), other(n);
    bool ok = true;
    const double oop = mean_us(comm.native(), bytes, [&] {
      ok = ok && comm.all_reduce(std::span<const float>(send), std::span<float>(recv), polycoll::sum).has_value();
    });
    const double native = mean_us(comm.native(), bytes, [&] {
      MPI_Allreduce(send.data(), other.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm.native());
    });
    const double in_place = mean_us(comm.native(), bytes, [&] {
      ok = ok && comm.all_reduce(std::span<float>(recv), polycoll::sum).has_value();
    });
    if (!ok) {
      std::fprintf(stderr, "an all_reduce failed\n");
      return 1;
    }
    if (root) std::printf("%12zu %14.2f %14.2f %14.2f\n", bytes, oop, native, in_place);
  }
  return 0;
}

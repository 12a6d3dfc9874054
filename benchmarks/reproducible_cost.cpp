// reproducible_cost: what Options::reproducible costs an Mpi all_reduce, as
// ratios measured in one binary. A plain and a reproducible communicator over
// the same ranks take turns round by round, so the drift of absolute times on
// a shared machine cancels; each figure is the median over rounds of
// (reproducible time / plain time in the same round), the time of a batch
// being the max over ranks. In-place all_reduce, f32 sum and f32 min.
//
//   mpiexec.mpich -n 3 reproducible_cost_mpi [--rounds R]
//
// At 1 and 2 ranks nothing changes; at 3 and more floating sums take the
// rank-order path (backends/mpi/ordered.hpp) and min stays MPI's (its column
// is the control: a ratio of 1). docs/benchmarks.md gives the figures.
#include <polycoll/backends/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "stats.hpp"

namespace {

using namespace polycoll;
using Clock = std::chrono::steady_clock;

using polycoll::bench::median;

constexpr std::size_t sizes[] = {8, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20};

std::size_t iterations(std::size_t bytes) {
  return bytes <= 1024 ? 200 : bytes <= 65536 ? 50 : bytes <= (1 << 20) ? 10 : 4;
}

// Seconds per call of `n` in-place all_reduces on `comm`, the max over ranks.
template <ReduceOp Op>
double batch(Mpi& comm, std::vector<float>& buf, std::size_t n, bool& ok) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) ok = comm.all_reduce(std::span<float>(buf), op_tag<Op>{}) && ok;
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(n);
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 11;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--rounds R]\n", argv[0]);
      return 2;
    }
  }
  mpi::Environment env(argc, argv);
  if (!env.ok()) return 1;
  Options reproducible;
  reproducible.reproducible = true;
  auto plain = Mpi::world();
  auto ordered = Mpi::world(reproducible);
  if (!plain || !ordered) return 1;
  Mpi* comms[2] = {&*plain, &*ordered};
  bool ok = true;
  if (plain->rank() == 0) {
    std::printf("# mpi, %zu ranks, in-place f32 all_reduce; median over %d rounds\n", plain->world_size(), rounds);
    std::printf("%10s %16s %18s %16s %18s\n", "bytes", "sum plain (us)", "sum repro / plain", "min plain (us)",
                "min repro / plain");
  }
  for (std::size_t bytes : sizes) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    const std::size_t n = iterations(bytes);
    std::vector<double> sum_us, sum_ratio, min_us, min_ratio;
    for (int r = 0; r < rounds; ++r) {
      double s[2], m[2];
      for (int k = 0; k < 2; ++k) {
        const int v = (k + r) % 2;  // alternate which goes first
        s[v] = batch<ReduceOp::Sum>(*comms[v], buf, n, ok);
        m[v] = batch<ReduceOp::Min>(*comms[v], buf, n, ok);
      }
      sum_us.push_back(s[0]);
      sum_ratio.push_back(s[1] / s[0]);
      min_us.push_back(m[0]);
      min_ratio.push_back(m[1] / m[0]);
    }
    if (plain->rank() == 0) {
      std::printf("%10zu %16.2f %18.3f %16.2f %18.3f\n", bytes, median(sum_us), median(sum_ratio), median(min_us),
                  median(min_ratio));
    }
  }
  return ok ? 0 : 1;
}

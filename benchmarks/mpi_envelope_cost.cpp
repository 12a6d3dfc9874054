// What detecting a send/recv dtype mismatch on Mpi would cost if the dtype
// travelled in an envelope: raw MPI ping-pong between ranks 0 and 1 of
// (a) the payload alone, (b) a 16-byte envelope message then the payload on
// the same tag (non-overtaking keeps them in order), (c) the payload with the
// envelope copied in front of it into one staging buffer. Interleaved rounds,
// median round trip per variant.
//
//   mpiexec.mpich -n 2 build/benchmarks/mpi_envelope_cost [payload bytes...]
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int iters = 2000;
constexpr int rounds = 9;

struct Envelope {
  std::uint64_t dtype;
  std::uint64_t count;
};

// One round trip per iteration; returns microseconds per round trip (rank 0).
double ping_pong(int variant, std::size_t bytes, int rank) {
  std::vector<unsigned char> buf(bytes + sizeof(Envelope)), staging(bytes + sizeof(Envelope));
  Envelope env{1, bytes};
  const int peer = 1 - rank;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    for (int leg = 0; leg < 2; ++leg) {
      const bool sender = (leg == 0) == (rank == 0);
      if (sender) {
        if (variant == 0) {
          MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        } else if (variant == 1) {
          MPI_Send(&env, sizeof env, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
          MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        } else {
          std::memcpy(staging.data(), &env, sizeof env);
          std::memcpy(staging.data() + sizeof env, buf.data(), bytes);
          MPI_Send(staging.data(), static_cast<int>(bytes + sizeof env), MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        }
      } else {
        if (variant == 0) {
          MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (variant == 1) {
          Envelope got{};
          MPI_Recv(&got, sizeof got, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          if (got.dtype != env.dtype) std::abort();
          MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(staging.data(), static_cast<int>(bytes + sizeof env), MPI_BYTE, peer, 7, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
          Envelope got{};
          std::memcpy(&got, staging.data(), sizeof got);
          if (got.dtype != env.dtype) std::abort();
          std::memcpy(buf.data(), staging.data() + sizeof env, bytes);
        }
      }
    }
  }
  return (MPI_Wtime() - t0) * 1e6 / iters;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "run with exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<std::size_t> sizes{8, 1024, 65536};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  }
  if (rank == 0) std::printf("# round trip, us (median of %d interleaved rounds of %d)\n", rounds, iters);
  if (rank == 0) std::printf("%10s %12s %14s %14s %10s %10s\n", "bytes", "payload", "+envelope msg", "+staged env",
                             "msg/plain", "stage/plain");
  for (std::size_t bytes : sizes) {
    std::vector<double> t[3];
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 3; ++v) t[v].push_back(ping_pong(v, bytes, rank));
    }
    for (auto& v : t) std::sort(v.begin(), v.end());
    const double a = t[0][rounds / 2], b = t[1][rounds / 2], c = t[2][rounds / 2];
    if (rank == 0) std::printf("%10zu %12.3f %14.3f %14.3f %10.2f %10.2f\n", bytes, a, b, c, b / a, c / a);
  }
  MPI_Finalize();
  return 0;
}

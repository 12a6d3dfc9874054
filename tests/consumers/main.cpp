// A downstream program: built against an installed polycoll by CMake
// (find_package) and by meson (pkg-config, and as a subproject).
//
// It uses every backend the installation was configured with, so that each
// way of consuming polycoll must carry that backend's usage requirements:
// the Mpi and Nccl headers are included by name (a missing include path is a
// compile error, not a silently skipped umbrella branch), and the program
// calls into MPI (a singleton world), cudart and NCCL (a missing library is a
// link error).
//
// It is built in both modes (run.sh): linking libpolycoll, and with
// POLYCOLL_HEADER_ONLY. The seed-surface digest it prints must be the same in
// both, since the seed surface runs in the library in one and inline in the other.
#include <polycoll/polycoll.hpp>

#if POLYCOLL_HAS_MPI
#include <polycoll/backends/mpi.hpp>
#endif
#if POLYCOLL_HAS_NCCL
#include <polycoll/backends/nccl.hpp>
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace {

std::uint64_t address(void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

// Sum over a world of three threads through AnyCommunicator: every rank gets 1 + 2 + 3.
bool threads_ok() {
  std::vector<double> sums(3);
  const auto status = polycoll::Threads::run(3, [&](polycoll::Threads& comm) {
    std::vector<double> v(8, static_cast<double>(comm.rank() + 1));
    polycoll::AnyCommunicator any{std::move(comm)};
    if (any.all_reduce(address(v.data()), v.size(), polycoll::DType::F64, polycoll::ReduceOp::Sum) && any.sync()) {
      sums[any.rank()] = v[7];
    }
  });
  return status && sums[0] == 6.0 && sums[1] == 6.0 && sums[2] == 6.0;
}

// The seed all_reduce on Threads (3 ranks) for a spread of (dtype, op) pairs,
// each on rank-dependent bytes: an FNV-1a digest of rank 0's results.
std::uint64_t seed_digest() {
  using polycoll::DType;
  using polycoll::ReduceOp;
  constexpr std::array<std::pair<DType, ReduceOp>, 8> pairs{{{DType::F32, ReduceOp::Avg},
                                                           {DType::BF16, ReduceOp::Sum},
                                                           {DType::F16, ReduceOp::Max},
                                                           {DType::I32, ReduceOp::Prod},
                                                           {DType::U8, ReduceOp::Min},
                                                           {DType::Bool, ReduceOp::Sum},
                                                           {DType::C64, ReduceOp::Prod},
                                                           {DType::F8E4M3, ReduceOp::Avg}}};
  constexpr std::size_t n = 16;
  std::vector<std::byte> result;
  const auto status = polycoll::Threads::run(3, [&](polycoll::Threads& comm) {
    std::vector<std::byte> mine;
    for (const auto& [d, op] : pairs) {
      std::vector<std::byte> buf(n * polycoll::size_of(d));
      // Small bytes keep every format finite; 1 + rank keeps bool meaningful.
      for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = static_cast<std::byte>(d == DType::Bool ? (i + comm.rank()) % 2 : (i * 7 + comm.rank() * 3) % 29 + 1);
      }
      if (!comm.all_reduce(address(buf.data()), n, d, op) || !comm.sync()) return;
      mine.insert(mine.end(), buf.begin(), buf.end());
    }
    if (comm.rank() == 0) result = std::move(mine);
  });
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte b : result) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return status && !result.empty() ? h : 0;
}

#if POLYCOLL_HAS_MPI
// A singleton MPI world (run without mpiexec): all_reduce of (rank + 1) over the world.
bool mpi_ok(int& argc, char**& argv) {
  polycoll::mpi::Environment env(argc, argv);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().error().message.c_str());
    return false;
  }
  auto comm = polycoll::Mpi::world();
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return false;
  }
  std::int64_t v = static_cast<std::int64_t>(comm->rank()) + 1;
  const auto w = static_cast<std::int64_t>(comm->world_size());
  return comm->all_reduce(std::span<std::int64_t>(&v, 1), polycoll::sum) && comm->sync() && v == w * (w + 1) / 2;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  bool ok = threads_ok();
  std::printf("consumer (polycoll %s, mpi=%d, nccl=%d): threads %s", POLYCOLL_VERSION_STRING, POLYCOLL_HAS_MPI,
              POLYCOLL_HAS_NCCL, ok ? "ok" : "WRONG");
#if POLYCOLL_HAS_MPI
  const bool mpi = mpi_ok(argc, argv);
  std::printf(", mpi %s", mpi ? "ok" : "WRONG");
  ok = ok && mpi;
#else
  (void)argc;
  (void)argv;
#endif
#if POLYCOLL_HAS_NCCL
  // Links cudart and NCCL; needs no GPU.
  int nccl_version = 0, gpus = 0;
  const bool nccl = ncclGetVersion(&nccl_version) == ncclSuccess && nccl_version > 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  std::printf(", nccl %d (%d GPU(s)) %s", nccl_version, gpus, nccl ? "ok" : "WRONG");
  ok = ok && nccl;
#endif
  std::printf(": %s\n", ok ? "ok" : "WRONG");
#if defined(POLYCOLL_HEADER_ONLY)
  std::printf("mode: header-only\n");
#else
  std::printf("mode: compiled\n");
#endif
  const std::uint64_t digest = seed_digest();
  std::printf("seed digest: %016llx\n", static_cast<unsigned long long>(digest));
  ok = ok && digest != 0;
  return ok ? 0 : 1;
}

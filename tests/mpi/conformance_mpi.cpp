// The conformance suite on Mpi: one rank per MPI process, world = the MPI
// world launched by mpiexec. Built once per policy bundle (POLYCOLL_MPI_POLICIES).
// POLYCOLL_TEST_OP_TIMEOUT_MS=<ms> in the environment sets op_timeout on every
// communicator it makes; with POLYCOLL_CHECK=1 too, every blocking collective
// takes the polled MPI_I* path after a fingerprint exchange (meson's
// conformance_mpi_timed_check_n*: the same executable, no extra build).
#include <polycoll/backends/mpi.hpp>

#include "../support.hpp"

#include <cstdlib>

#ifndef POLYCOLL_MPI_POLICIES
#define POLYCOLL_MPI_POLICIES polycoll::mpi::DefaultPolicies
#endif

namespace polycoll::test {

struct MpiFixture {
  using Backend = BasicMpi<POLYCOLL_MPI_POLICIES>;
  template <class T>
  using Buffer = HostBuffer<T>;
  static constexpr bool host_memory = true;
  static constexpr bool matches_tags = true;
  static constexpr bool split_may_be_unsupported = false;
  static constexpr std::size_t large_count = (1u << 22) / 4;  // 4 MiB of f32
  static std::vector<std::size_t> world_sizes() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return {static_cast<std::size_t>(n)};
  }
  template <class F>
  static std::vector<Report> run(std::size_t world, F body) {
    Report rep;
    rep.world = world;
    Options o;
    if (const char* e = std::getenv("POLYCOLL_TEST_OP_TIMEOUT_MS"); e && std::atoi(e) > 0) {
      o.op_timeout = std::chrono::milliseconds(std::atoi(e));
    }
    auto comm = Backend::world(o);
    if (!comm) {
      rep.failures.push_back("Mpi::world: " + comm.error().message);
      return {rep};
    }
    rep.rank = comm->rank();
    body(*comm, rep);
    return {rep};
  }
};

}  // namespace polycoll::test

#define POLYCOLL_FIXTURE polycoll::test::MpiFixture
#define POLYCOLL_TAG "[mpi]"
#include "../conformance.hpp"

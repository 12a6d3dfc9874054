// The conformance suite on Mpi: one rank per MPI process, world = the MPI
// world launched by mpiexec. Built once per policy bundle (POLYCOLL_MPI_POLICIES),
// and once with op_timeout and the consistency check on (POLYCOLL_MPI_TIMED_CHECK:
// every blocking collective then takes the polled MPI_I* path, after a
// fingerprint exchange).
#include <polycoll/backends/mpi.hpp>

#include "../support.hpp"

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
#ifdef POLYCOLL_MPI_TIMED_CHECK
    o.op_timeout = std::chrono::milliseconds(60000);
    o.check_consistency = true;
#endif
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

// Options::on_error / POLYCOLL_ON_ERROR on Mpi (docs/reliability.md, "Abort
// on error"), run by check.py under mpiexec with two ranks: rank 0 makes one
// failing call (argv[1] names the scenario) while rank 1 waits in a barrier
// for it. Under abort the job must end (MPI_Abort) with the fatal line, rank 1
// included; where the error is returned, rank 0 prints "RETURNED: <message>",
// both meet in the barrier and the job exits 0. Its own main: the Catch2 main
// keeps every rank to the end.
#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/mpi.hpp>
#include "death_common.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using death::aborting;
using death::returned;
using polycoll::DType;
using polycoll::OnError;
using polycoll::Options;
using polycoll::Status;

// Rank 0 runs `bad`; every other rank waits in a barrier. Where the error
// comes back, rank 0 joins the barrier too.
template <class C, class F>
int rank0_fails(C& comm, F&& bad) {
  if (comm.rank() != 0) {
    const Status s = comm.barrier();
    return s ? 0 : returned(s);
  }
  const int rc = returned(bad(comm));
  const Status s = comm.barrier();
  return rc != 0 || !s ? 1 : 0;
}

int run(std::string_view scenario) {
  if (scenario == "factory") {
    // Every rank: the factory's own error ends the job.
    auto made = polycoll::Mpi::borrow(MPI_COMM_NULL, aborting());
    return made ? 1 : returned(tl::unexpected(made.error()));
  }
  const bool abort_option = scenario == "check" || scenario == "backend" || scenario == "any" || scenario == "drop";
  Options o = abort_option ? aborting() : Options{};
  if (scenario == "backend") o.check_consistency = true;
  if (scenario == "drop") o.drop_timeout = std::chrono::milliseconds(100);
  auto comm = polycoll::Mpi::world(o);
  if (!comm) return returned(tl::unexpected(comm.error()));
  if (comm->world_size() < 2) {
    std::printf("SKIPPED: needs two ranks\n");
    return 77;
  }
  if (scenario == "check" || scenario == "default") {
    // A bad root, found by the front end's check (POLYCOLL_ON_ERROR decides for "default").
    return rank0_fails(*comm, [](auto& c) { return c.broadcast(0x1000, 4, DType::F32, 9); });
  }
  if (scenario == "backend") {
    // An error the backend returns: the consistency check fails on every rank.
    std::vector<float> v(comm->rank() == 0 ? 4 : 8);
    return returned(comm->all_reduce(std::span(v), polycoll::sum));
  }
  if (scenario == "any") {
    // Through AnyCommunicator's typed surface: the held Mpi's setting governs.
    polycoll::AnyCommunicator any{std::move(*comm)};
    return rank0_fails(any, [](auto& c) {
      std::array<float, 4> send{};
      std::array<float, 5> recv{};
      return c.all_gather(std::span(send), std::span(recv));
    });
  }
  if (scenario == "drop") {
    // Not returned to a caller, so no abort: rank 0's receive that nobody
    // matches is dropped by the destructor (logged after drop_timeout).
    std::array<float, 2> v{};
    const std::size_t me = comm->rank();
    if (me == 0) {
      if (auto s = comm->recv(std::span(v), 1, 9); !s) return returned(s);
    }
    { auto gone = std::move(*comm); }
    std::printf("SURVIVED: rank %zu\n", me);
    return 0;
  }
  std::fprintf(stderr, "unknown scenario\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  polycoll::mpi::Environment env(argc, argv);
  if (!env.ok() || argc != 2) return 2;
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  return run(argv[1]);
}

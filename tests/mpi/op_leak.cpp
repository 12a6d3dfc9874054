// The cached user MPI_Ops are freed before MPI_Finalize. This program creates
// every op polycoll can make (f16, bf16, f8e4m3, f8e5m2 with every op, and the
// kernel_ops policy's ops for native dtypes), uses them, and finalises MPI:
// through mpi::Environment (default) or, with --user-finalize, by calling
// MPI_Init_thread / MPI_Finalize itself (polycoll's MPI_COMM_SELF hook frees
// the ops then).
//
// The proof goes through MPI's profiling interface: this executable defines
// MPI_Op_create, MPI_Op_free and MPI_Finalize, counts the ops that are alive,
// and fails if any is alive once MPI_Finalize returns. valgrind alone cannot
// see such a leak: MPICH and Open MPI both free or keep reachable their op
// tables at MPI_Finalize. meson also runs it under valgrind --leak-check=full
// --error-exitcode=1 (tests/mpi/mpi.supp suppresses MPI's own start-up and
// shut-down blocks only) for polycoll's other allocations.
// Its own main: the Catch2 main would initialise MPI itself.
#include <polycoll/backends/mpi.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

namespace {

std::atomic<int> g_created{0};
std::atomic<int> g_freed{0};
int g_alive_at_finalize = -1;     // as MPI_Finalize is called
int g_alive_after_finalize = -1;  // as it returns

}  // namespace

// PMPI interposition (the MPI standard's profiling interface): these
// definitions take the place of the library's for every caller in this
// executable, polycoll's headers included.
int MPI_Op_create(MPI_User_function* fn, int commute, MPI_Op* op) {
  const int rc = PMPI_Op_create(fn, commute, op);
  if (rc == MPI_SUCCESS) g_created.fetch_add(1);
  return rc;
}
int MPI_Op_free(MPI_Op* op) {
  const int rc = PMPI_Op_free(op);
  if (rc == MPI_SUCCESS) g_freed.fetch_add(1);
  return rc;
}
int MPI_Finalize() {
  g_alive_at_finalize = g_created.load() - g_freed.load();
  const int rc = PMPI_Finalize();  // runs polycoll's MPI_COMM_SELF delete hook first
  g_alive_after_finalize = g_created.load() - g_freed.load();
  return rc;
}

namespace {

using KernelMpi = polycoll::BasicMpi<polycoll::mpi::Policies<polycoll::mpi::blocking, polycoll::mpi::kernel_ops>>;

int failures = 0;

// All valid ops of dtype D through `comm`: each (D, op) pair that needs a
// user op creates (and caches) one.
template <polycoll::DType D, class Comm>
void every_op(Comm& comm) {
  using T = typename polycoll::dtype_tag<D>::type;
  std::vector<T> v(64, T(1));
  auto one = [&]<polycoll::ReduceOp Op>() {
    if constexpr (polycoll::is_valid_v<D, Op>) {
      if (!comm.all_reduce(std::span<T>(v), polycoll::op_tag<Op>{})) ++failures;
    }
  };
  one.template operator()<polycoll::ReduceOp::Sum>();
  one.template operator()<polycoll::ReduceOp::Prod>();
  one.template operator()<polycoll::ReduceOp::Min>();
  one.template operator()<polycoll::ReduceOp::Max>();
  one.template operator()<polycoll::ReduceOp::Avg>();
}

}  // namespace

int main(int argc, char** argv) {
  using polycoll::DType;
  const bool user_finalize = argc > 1 && std::strcmp(argv[1], "--user-finalize") == 0;
  std::size_t cached = 0;
  {
    std::optional<polycoll::mpi::Environment> env;
    if (user_finalize) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
      env.emplace(argc, argv);
      if (!env->ok() || !env->owns()) {
        std::fprintf(stderr, "FAILED: Environment: %s\n",
                     env->ok() ? "MPI was already initialised" : env->status().error().message.c_str());
        return 1;
      }
    }
    {
      auto mpi = polycoll::Mpi::world();
      auto kernel = KernelMpi::world();
      if (!mpi || !kernel) {
        std::fprintf(stderr, "FAILED: world()\n");
        return 1;
      }
      every_op<DType::F16>(*mpi);
      every_op<DType::BF16>(*mpi);
      every_op<DType::F8E4M3>(*mpi);
      every_op<DType::F8E5M2>(*mpi);
      every_op<DType::F32>(*kernel);
      every_op<DType::F64>(*kernel);
      every_op<DType::I32>(*kernel);
      every_op<DType::U8>(*kernel);
      cached = polycoll::detail::mpi::cached_op_count();
      if (!mpi->barrier()) ++failures;
    }  // the communicators are freed
    if (user_finalize) MPI_Finalize();
  }  // (Environment mode) MPI_Finalize here, after polycoll frees the ops
  if (g_alive_after_finalize != 0) {
    std::fprintf(stderr, "FAILED: %d of %d user MPI_Ops still alive after MPI_Finalize (leaked)\n",
                 g_alive_after_finalize, g_created.load());
    ++failures;
  }
  if (!user_finalize && g_alive_at_finalize != 0) {
    std::fprintf(stderr, "FAILED: mpi::Environment called MPI_Finalize with %d user MPI_Ops alive\n",
                 g_alive_at_finalize);
    ++failures;
  }
  if (cached < 20 || g_created.load() != static_cast<int>(cached)) {
    std::fprintf(stderr, "FAILED: %zu user ops cached, %d created through MPI_Op_create\n", cached,
                 g_created.load());
    ++failures;
  }
  if (polycoll::detail::mpi::cached_op_count() != 0) {
    std::fprintf(stderr, "FAILED: %zu cached ops alive after MPI_Finalize\n", polycoll::detail::mpi::cached_op_count());
    ++failures;
  }
  if (failures == 0) {
    std::printf("op_leak (%s): %d user MPI_Ops created, all freed by the end of MPI_Finalize\n",
                user_finalize ? "user MPI_Finalize" : "mpi::Environment", g_created.load());
  }
  return failures == 0 ? 0 : 1;
}

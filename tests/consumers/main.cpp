// A downstream program: built against an installed polycoll by CMake
// (find_package) and by meson (pkg-config, and as a subproject).
#include <polycoll/polycoll.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<double> sums(3);
  const auto status = polycoll::Threads::run(3, [&](polycoll::Threads& comm) {
    std::vector<double> v(8, static_cast<double>(comm.rank() + 1));
    polycoll::AnyCommunicator any{std::move(comm)};
    if (any.all_reduce(polycoll::detail::to_address(v.data()), v.size(), polycoll::DType::F64,
                       polycoll::ReduceOp::Sum)) {
      sums[any.rank()] = v[7];
    }
  });
  const bool ok = status && sums[0] == 6.0 && sums[1] == 6.0 && sums[2] == 6.0;
  std::printf("consumer (polycoll %s, mpi=%d, nccl=%d): %s\n", POLYCOLL_VERSION_STRING, POLYCOLL_HAS_MPI,
              POLYCOLL_HAS_NCCL, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

// MPI before initialisation and after finalisation: Errc::not_initialized,
// never a crash. Its own main, because the Catch2 main initialises MPI.
#include <polycoll/backends/mpi.hpp>

#include <array>
#include <cstdio>
#include <optional>
#include <string>

namespace {

int failures = 0;

void expect(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s %s\n", what, detail.c_str());
  }
}

template <class R>
void expect_not_initialized(const R& r, const char* what) {
  expect(!r, what, "succeeded");
  if (!r) {
    expect(r.error().code == polycoll::Errc::not_initialized, what, r.error().message);
    std::printf("%s -> %s\n", what, r.error().message.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using polycoll::Mpi;
  expect(polycoll::mpi::thread_level() == -1, "thread_level before init");
  expect_not_initialized(Mpi::world(), "Mpi::world() before MPI_Init");
  expect_not_initialized(Mpi::borrow(MPI_COMM_WORLD), "Mpi::borrow() before MPI_Init");
  std::optional<Mpi> kept;
  std::array<polycoll::bf16, 8> v{};
  {
    polycoll::mpi::Environment env(argc, argv);
    expect(env.ok() && env.owns(), "Environment initialises MPI");
    expect(env.provided() == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE provided");
    {
      polycoll::mpi::Environment nested;
      expect(nested.ok() && !nested.owns(), "a second Environment owns nothing");
    }
    int init = 0;
    MPI_Initialized(&init);
    expect(init == 1, "the nested Environment did not finalize");
    auto w = Mpi::world();
    expect(w.has_value(), "Mpi::world()", w ? "" : w.error().message);
    if (!w) return 1;
    v.fill(polycoll::bf16(1.0f));
    expect(w->all_reduce(std::span(v), polycoll::sum).has_value(), "bf16 all_reduce");
    expect(static_cast<float>(v[7]) == static_cast<float>(w->world_size()), "bf16 all_reduce value");
    expect(polycoll::detail::mpi::cached_op_count() >= 1, "the bf16 sum op is cached");
    kept.emplace(std::move(*w));
  }  // MPI_Finalize
  int fin = 0;
  MPI_Finalized(&fin);
  expect(fin == 1, "Environment finalized MPI");
  expect(polycoll::detail::mpi::cached_op_count() == 0, "cached MPI_Ops freed before MPI_Finalize");
  expect_not_initialized(kept->all_reduce(std::span(v), polycoll::sum), "all_reduce after MPI_Finalize");
  expect_not_initialized(kept->sync(), "sync after MPI_Finalize");
  expect_not_initialized(kept->barrier(), "barrier after MPI_Finalize");
  expect_not_initialized(kept->split(0, 0), "split after MPI_Finalize");
  expect_not_initialized(Mpi::world(), "Mpi::world() after MPI_Finalize");
  polycoll::mpi::Environment again;
  expect(!again.ok() && again.status().error().code == polycoll::Errc::not_initialized,
         "Environment after MPI_Finalize");
  kept.reset();  // destroying a communicator after MPI_Finalize is safe
  if (failures == 0) std::printf("lifecycle: all checks passed\n");
  return failures == 0 ? 0 : 1;
}

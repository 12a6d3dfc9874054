// A rank that exits early (docs/reliability.md): every rank but 0 finalises
// MPI and leaves main at once; rank 0 then calls a collective, sync() and
// barrier() with op_timeout set and must get Errc::timeout from each within
// the timeout plus 10% (plus scheduling slack), never hang, and destroy its
// communicator within drop_timeout, logging what it dropped. A rank that
// exits WITHOUT MPI_Finalize cannot be tested this way: MPICH's and Open
// MPI's launchers kill the whole job (documented). Its own main, since the
// Catch2 main keeps every rank to the end.
#include <polycoll/backends/mpi.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace {

using Clock = std::chrono::steady_clock;
int failures = 0;
int logged = 0;

void expect(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s %s\n", what, detail.c_str());
  }
}

// Counts the warnings that name dropped operations; the one that says the
// status board is left to MPI_Finalize (its peers are gone) may come too.
void capture(polycoll::LogLevel, std::string_view m) noexcept {
  if (m.find("dropped: ") != std::string_view::npos) ++logged;
  std::printf("logged: %.*s\n", static_cast<int>(m.size()), m.data());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  polycoll::mpi::Environment env(argc, argv);
  if (!env.ok()) return 1;
  polycoll::Options o;
  o.op_timeout = 300ms;
  o.drop_timeout = 100ms;
  auto comm = polycoll::Mpi::world(o);
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return 1;
  }
  if (comm->world_size() < 2) {
    std::printf("SKIPPED: needs two ranks\n");
    return 77;
  }
  if (comm->rank() != 0) return 0;  // exits early: ~Mpi, then MPI_Finalize in ~Environment
  const auto bound = 300ms + 30ms + 100ms;
  auto timed = [&](const char* what, auto&& call) {
    const auto t0 = Clock::now();
    const polycoll::Status s = call();
    const auto took = Clock::now() - t0;
    const double ms = std::chrono::duration<double, std::milli>(took).count();
    expect(!s, what, "succeeded although the peers are gone");
    if (!s) {
      expect(s.error().code == polycoll::Errc::timeout, what, s.error().message);
      std::printf("%s -> after %.1f ms: %s\n", what, ms, s.error().message.c_str());
    }
    expect(took >= 300ms && took <= bound, what, "took " + std::to_string(ms) + " ms");
  };
  std::array<float, 16> v{};
  v.fill(1.0f);
  timed("all_reduce", [&] { return comm->all_reduce(v, polycoll::sum); });
  timed("sync", [&] { return comm->sync(); });
  timed("barrier", [&] { return comm->barrier(); });
  const polycoll::LogSink old = polycoll::set_log_sink(&capture);
  const auto t0 = Clock::now();
  { auto dying = std::move(*comm); }
  const auto took = Clock::now() - t0;
  polycoll::set_log_sink(old);
  expect(logged == 1, "the drop is logged once");
  expect(took <= 100ms + 100ms, "destruction within drop_timeout",
         std::to_string(std::chrono::duration<double, std::milli>(took).count()) + " ms");
  std::printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}

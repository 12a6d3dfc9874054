// check_cost: what the consistency check (Options::check_consistency,
// POLYCOLL_CHECK=1), op_timeout and the flight recorder cost per collective,
// measured in one binary. Communicators over the same ranks - plain (the
// default options, flight recorder on), with the check, (Mpi:) with
// op_timeout, and without the flight recorder (flight_record_size 0) - take
// turns round by round, so the drift of absolute times on a shared machine
// cancels. Each ratio is the median over rounds of (time with the option /
// plain time in the same round); the recorder's column is the median of
// (plain - unrecorded) per call in ns. The time of a batch is the max over
// ranks. In-place f32 sum all_reduce.
//
//   check_cost_threads [--rounds R] [--ranks N]
//   mpiexec.mpich -n 2 check_cost_mpi [--rounds R]
//
// docs/reliability.md gives the figures.
#include <polycoll/backends/threads.hpp>
#if POLYCOLL_CHECK_COST_MPI
#include <polycoll/backends/mpi.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "stats.hpp"

namespace {

using namespace polycoll;
using Clock = std::chrono::steady_clock;
using polycoll::bench::median;

constexpr std::size_t sizes[] = {8, 1024, 65536, 1 << 20};

std::size_t iterations(std::size_t bytes) { return bytes <= 1024 ? 400 : bytes <= 65536 ? 100 : 10; }

// The variants, in the order of their communicators; plain is first.
enum Variant { plain, checked, unrecorded, timed, variants };

Options options_of(Variant v) {
  Options o;
  if (v == checked) o.check_consistency = true;
  if (v == unrecorded) o.flight_record_size = 0;
  if (v == timed) o.op_timeout = std::chrono::milliseconds(60000);
  return o;
}

struct Row {
  std::size_t bytes;
  std::vector<double> plain_us, check_ratio, recorder_ns, timeout_ratio;

  // One round's times per call (us), indexed by Variant.
  void add(const double* t, bool with_timeout) {
    plain_us.push_back(t[plain]);
    check_ratio.push_back(t[checked] / t[plain]);
    recorder_ns.push_back((t[plain] - t[unrecorded]) * 1000.0);
    if (with_timeout) timeout_ratio.push_back(t[timed] / t[plain]);
  }
};

void print(const char* backend, std::size_t ranks, const std::vector<Row>& rows, bool with_timeout) {
  std::printf("# %s, %zu ranks, in-place f32 sum all_reduce; median over rounds\n", backend, ranks);
  std::printf("%10s %12s %14s %16s%s\n", "bytes", "plain (us)", "check / plain", "recorder (ns)",
              with_timeout ? "  timeout / plain" : "");
  for (const Row& r : rows) {
    std::printf("%10zu %12.3f %14.3f %16.1f", r.bytes, median(r.plain_us), median(r.check_ratio),
                median(r.recorder_ns));
    if (with_timeout) std::printf(" %16.3f", median(r.timeout_ratio));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  [[maybe_unused]] std::size_t nranks = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      nranks = static_cast<std::size_t>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--rounds R] [--ranks N]\n", argv[0]);
      return 2;
    }
  }
#if POLYCOLL_CHECK_COST_MPI
  mpi::Environment env(argc, argv);
  if (!env.ok()) return 1;
  std::vector<Mpi> comms;
  for (int v = 0; v < variants; ++v) {
    auto c = Mpi::world(options_of(static_cast<Variant>(v)));
    if (!c) return 1;
    comms.push_back(std::move(*c));
  }
  std::vector<Row> rows;
  for (std::size_t bytes : sizes) {
    Row row{bytes, {}, {}, {}, {}};
    std::vector<float> buf(bytes / sizeof(float), 0.0f);
    const std::size_t n = iterations(bytes);
    for (int r = 0; r < rounds; ++r) {
      double t[variants];
      for (int k = 0; k < variants; ++k) {
        const int v = (k + r) % variants;  // rotate the order per round
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = Clock::now();
        for (std::size_t i = 0; i < n; ++i) {
          if (!comms[v].all_reduce(std::span<float>(buf), polycoll::sum)) return 1;
        }
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(n);
        MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[v] = us;
      }
      row.add(t, true);
    }
    rows.push_back(std::move(row));
  }
  if (comms[0].rank() == 0) print("mpi", comms[0].world_size(), rows, true);
#else
  // Threads has no op_timeout column: its bound costs one clock read per call.
  constexpr int used = timed;
  std::vector<std::vector<Threads>> worlds;
  for (int v = 0; v < used; ++v) {
    auto c = Threads::create(nranks, options_of(static_cast<Variant>(v)));
    if (!c) return 1;
    worlds.push_back(std::move(*c));
  }
  // One thread per rank for the whole run; a barrier on the plain
  // communicator before and after each batch, so rank 0's clock spans every
  // rank's batch.
  std::vector<Row> rows;
  for (std::size_t bytes : sizes) rows.push_back(Row{bytes, {}, {}, {}, {}});
  std::atomic<bool> ok{true};
  std::vector<std::thread> ts;
  for (std::size_t q = 0; q < nranks; ++q) {
    ts.emplace_back([&, q] {
      for (Row& row : rows) {
        std::vector<float> buf(row.bytes / sizeof(float), 0.0f);
        const std::size_t n = iterations(row.bytes);
        for (int r = 0; r < rounds; ++r) {
          double t[variants] = {};
          for (int k = 0; k < used; ++k) {
            const int v = (k + r) % used;
            if (!worlds[plain][q].barrier()) ok = false;
            const auto t0 = Clock::now();
            for (std::size_t i = 0; i < n; ++i) {
              if (!worlds[v][q].all_reduce(std::span<float>(buf), polycoll::sum)) ok = false;
            }
            if (!worlds[plain][q].barrier()) ok = false;
            t[v] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(n);
          }
          if (q == 0) row.add(t, false);
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  if (!ok) return 1;
  print("threads", nranks, rows, false);
#endif
  return 0;
}

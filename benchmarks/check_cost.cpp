// check_cost: what the consistency check (Options::check_consistency,
// POLYCOLL_CHECK=1) and op_timeout cost per collective, as ratios measured in
// one binary. Two (Mpi: three) communicators over the same ranks - plain,
// with the check, with op_timeout - take turns round by round, so the drift of
// absolute times on a shared machine cancels; each figure is the median over
// rounds of (time with the option / plain time in the same round), the time of
// a batch being the max over ranks. In-place f32 sum all_reduce.
//
//   check_cost_threads [--rounds R] [--ranks N]
//   mpiexec.mpich -n 2 check_cost_mpi [--rounds R]
//
// docs/reliability.md gives the figures.
#include <polycoll/backends/threads.hpp>
#if POLYCOLL_CHECK_COST_MPI
#include <polycoll/backends/mpi.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace polycoll;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

constexpr std::size_t sizes[] = {8, 1024, 65536, 1 << 20};

std::size_t iterations(std::size_t bytes) { return bytes <= 1024 ? 400 : bytes <= 65536 ? 100 : 10; }

struct Row {
  std::size_t bytes;
  std::vector<double> plain_us, check_ratio, timeout_ratio;
};

void print(const char* backend, std::size_t ranks, const std::vector<Row>& rows, bool with_timeout) {
  std::printf("# %s, %zu ranks, in-place f32 sum all_reduce; median over rounds\n", backend, ranks);
  std::printf("%10s %12s %14s%s\n", "bytes", "plain (us)", "check / plain", with_timeout ? "  timeout / plain" : "");
  for (const Row& r : rows) {
    std::printf("%10zu %12.2f %14.3f", r.bytes, median(r.plain_us), median(r.check_ratio));
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
  Options checked;
  checked.check_consistency = true;
  Options timed;
  timed.op_timeout = std::chrono::milliseconds(60000);
  auto plain = Mpi::world();
  auto with_check = Mpi::world(checked);
  auto with_timeout = Mpi::world(timed);
  if (!plain || !with_check || !with_timeout) return 1;
  Mpi* comms[3] = {&*plain, &*with_check, &*with_timeout};
  std::vector<Row> rows;
  for (std::size_t bytes : sizes) {
    Row row{bytes, {}, {}, {}};
    std::vector<float> buf(bytes / sizeof(float), 0.0f);
    const std::size_t n = iterations(bytes);
    for (int r = 0; r < rounds; ++r) {
      double t[3];
      for (int k = 0; k < 3; ++k) {
        const int v = (k + r) % 3;  // rotate the order per round
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = Clock::now();
        for (std::size_t i = 0; i < n; ++i) {
          if (!comms[v]->all_reduce(std::span<float>(buf), polycoll::sum)) return 1;
        }
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(n);
        MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[v] = us;
      }
      row.plain_us.push_back(t[0]);
      row.check_ratio.push_back(t[1] / t[0]);
      row.timeout_ratio.push_back(t[2] / t[0]);
    }
    rows.push_back(std::move(row));
  }
  if (plain->rank() == 0) print("mpi", plain->world_size(), rows, true);
#else
  Options checked;
  checked.check_consistency = true;
  auto plain = Threads::create(nranks);
  auto with_check = Threads::create(nranks, checked);
  if (!plain || !with_check) return 1;
  // One thread per rank for the whole run; a barrier on the plain
  // communicator before and after each batch, so rank 0's clock spans every
  // rank's batch.
  std::vector<Row> rows;
  for (std::size_t bytes : sizes) rows.push_back(Row{bytes, {}, {}, {}});
  std::atomic<bool> ok{true};
  std::vector<std::thread> ts;
  for (std::size_t q = 0; q < nranks; ++q) {
    ts.emplace_back([&, q] {
      Threads* comms[2] = {&(*plain)[q], &(*with_check)[q]};
      for (Row& row : rows) {
        std::vector<float> buf(row.bytes / sizeof(float), 0.0f);
        const std::size_t n = iterations(row.bytes);
        for (int r = 0; r < rounds; ++r) {
          double t[2];
          for (int k = 0; k < 2; ++k) {
            const int v = (k + r) % 2;
            if (!comms[0]->barrier()) ok = false;
            const auto t0 = Clock::now();
            for (std::size_t i = 0; i < n; ++i) {
              if (!comms[v]->all_reduce(std::span<float>(buf), polycoll::sum)) ok = false;
            }
            if (!comms[0]->barrier()) ok = false;
            t[v] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(n);
          }
          if (q == 0) {
            row.plain_us.push_back(t[0]);
            row.check_ratio.push_back(t[1] / t[0]);
          }
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

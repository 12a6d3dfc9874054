// examples/tutorial/threads.cpp: four ranks as four threads of one process.
#include <polycoll/threads.hpp>

#include <atomic>
#include <cstdio>

#include "stats.hpp"

int main() {
  std::atomic<int> wrong{0};
  const auto status = polycoll::Threads::run(4, [&](polycoll::Threads& comm) {
    const auto data = slice(comm.rank(), 1000);
    const auto stats = global_stats(comm, data);
    if (!stats) {
      std::fprintf(stderr, "%s\n", stats.error().message.c_str());
      ++wrong;
    } else if (!plausible(*stats)) {
      ++wrong;
    } else if (comm.rank() == 0) {
      std::printf("%g values on %zu ranks: mean %g, stddev %g\n", stats->count, comm.world_size(), stats->mean,
                  stats->stddev);
    }
  });
  if (!status) std::fprintf(stderr, "%s\n", status.error().message.c_str());
  return status && wrong == 0 ? 0 : 1;
}

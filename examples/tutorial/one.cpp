// examples/tutorial/one.cpp: one rank, no communication library at all.
#include <polycoll/noop.hpp>

#include <cstdio>

#include "stats.hpp"

int main() {
  polycoll::NoOp comm;  // a world of one rank
  const auto data = slice(comm.rank(), 1000);
  const auto stats = global_stats(comm, data);
  if (!stats) {
    std::fprintf(stderr, "%s\n", stats.error().message.c_str());
    return 1;
  }
  std::printf("%g values on %zu rank: mean %g, stddev %g\n", stats->count, comm.world_size(), stats->mean,
              stats->stddev);
  return plausible(*stats) ? 0 : 1;
}

// The heat equation on the Threads backend: `heat_threads [ranks]`.
#include <polycoll/threads.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "heat.hpp"

int main(int argc, char** argv) {
  const std::size_t ranks = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4;
  const heat::Params p;
  std::atomic<int> failures{0};
  const auto status = polycoll::Threads::run(ranks, [&](polycoll::Threads& comm) {
    auto r = heat::solve(comm, p);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      ++failures;
    } else if (!heat::check(*r, p, comm.rank(), comm.world_size(), "threads")) {
      ++failures;
    }
  });
  if (!status) std::fprintf(stderr, "%s\n", status.error().message.c_str());
  return status && failures == 0 ? 0 : 1;
}

// Data-parallel training on the Threads backend: `train_threads [ranks] [--op avg|sum]`.
#include <polycoll/threads.hpp>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <string_view>

#include "train.hpp"

int main(int argc, char** argv) {
  std::size_t ranks = 4;
  int first = 1;
  if (argc > 1 && argv[1][0] != '-') {
    const std::string_view a = argv[1];
    const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), ranks);
    if (ec != std::errc{} || end != a.data() + a.size() || ranks == 0 || ranks > 64) {
      std::fprintf(stderr, "train_threads: ranks must be an integer in [1, 64], got '%s'\n", argv[1]);
      return 2;
    }
    first = 2;
  }
  const auto params = train::parse_args(argc, argv, first);
  if (!params) {
    std::fprintf(stderr, "%s\n", params.error().message.c_str());
    return 2;
  }
  const std::vector<double> want = train::reference(*params);
  std::atomic<int> failures{0};
  const auto status = polycoll::Threads::run(ranks, [&](polycoll::Threads& comm) {
    train::HostExchange ex(comm, params->features, params->op);
    auto r = train::run(comm, ex, *params);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      ++failures;
    } else if (!train::check(*r, want, *params, comm.rank(), comm.world_size(), "threads")) {
      ++failures;
    }
  });
  if (!status) std::fprintf(stderr, "%s\n", status.error().message.c_str());
  return status && failures == 0 ? 0 : 1;
}

// The conformance suite on Threads, at world sizes 1 through 8.
#include <polycoll/backends/threads.hpp>

#include "support.hpp"

#include <thread>

namespace polycoll::test {

struct ThreadsFixture {
  using Backend = Threads;
  template <class T>
  using Buffer = HostBuffer<T>;
  static constexpr bool host_memory = true;
  static constexpr bool matches_tags = true;
  static constexpr bool split_may_be_unsupported = false;
  static constexpr std::size_t large_count = (1u << 22) / 4;  // 4 MiB of f32
  static std::vector<std::size_t> world_sizes() { return {1, 2, 3, 4, 5, 6, 7, 8}; }
  template <class F>
  static std::vector<Report> run(std::size_t world, F body) {
    auto comms = Threads::create(world);
    if (!comms) {
      Report rep;
      rep.world = world;
      rep.failures.push_back("Threads::create: " + comms.error().message);
      return {rep};
    }
    std::vector<Report> reports(world);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < world; ++r) {
      reports[r].rank = r;
      reports[r].world = world;
      threads.emplace_back([&, r] { body((*comms)[r], reports[r]); });
    }
    for (auto& t : threads) t.join();
    return reports;
  }
};

}  // namespace polycoll::test

#define POLYCOLL_FIXTURE polycoll::test::ThreadsFixture
#define POLYCOLL_TAG "[threads]"
#include "conformance.hpp"

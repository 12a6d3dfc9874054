// The conformance suite on Threads, at world sizes 1 through 8
// (POLYCOLL_TEST_MAX_WORLD=<n> stops at n: ./run's -O0 sanitizer step, where
// 5-8 spinning rank threads on two cores cost minutes and find nothing new).
#include <polycoll/backends/threads.hpp>

#include "support.hpp"

#include <cstdlib>
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
  static std::vector<std::size_t> world_sizes() {
    std::size_t max = 8;
    if (const char* e = std::getenv("POLYCOLL_TEST_MAX_WORLD"); e && std::atoi(e) > 0) {
      max = std::min<std::size_t>(max, static_cast<std::size_t>(std::atoi(e)));
    }
    std::vector<std::size_t> sizes;
    for (std::size_t w = 1; w <= max; ++w) sizes.push_back(w);
    return sizes;
  }
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

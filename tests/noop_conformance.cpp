// The conformance suite on NoOp (world 1).
#include "support.hpp"

namespace polycoll::test {

struct NoOpFixture {
  using Backend = NoOp;
  template <class T>
  using Buffer = HostBuffer<T>;
  static constexpr bool host_memory = true;
  static constexpr bool matches_tags = true;
  static constexpr bool split_may_be_unsupported = false;
  static constexpr std::size_t large_count = 1u << 20;
  static std::vector<std::size_t> world_sizes() { return {1}; }
  template <class F>
  static std::vector<Report> run(std::size_t world, F body) {
    NoOp comm;
    Report rep;
    rep.world = world;
    body(comm, rep);
    return {rep};
  }
};

}  // namespace polycoll::test

#define POLYCOLL_FIXTURE polycoll::test::NoOpFixture
#define POLYCOLL_TAG "[noop]"
#include "conformance.hpp"

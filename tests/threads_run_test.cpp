// Threads::run with rank functions that return a Status: the first failure
// (in time) is what run returns, with its rank; it aborts the world, so the
// other ranks' blocking calls return Errc::aborted naming it instead of hanging.
#include <catch2/catch.hpp>

#include <polycoll/backends/threads.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using polycoll::Errc;
using polycoll::Status;
using polycoll::Threads;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("run: every rank returning success is success", "[threads][run]") {
  for (std::size_t n : {1u, 2u, 4u}) {
    INFO("world " << n);
    std::atomic<int> calls{0};
    const Status s = Threads::run(n, [&](Threads& comm) -> Status {
      ++calls;
      std::array<int, 3> v{1, 2, 3};
      if (auto st = comm.all_reduce(std::span(v), polycoll::sum); !st) return st;
      return comm.barrier();
    });
    INFO((s ? std::string() : s.error().message));
    CHECK(s);
    CHECK(calls == static_cast<int>(n));
  }
}

TEST_CASE("run: a rank returning a failure is run's result, and the others' blocking calls return aborted",
          "[threads][run][errors]") {
  for (std::size_t n : {2u, 3u, 4u}) {
    INFO("world " << n);
    const std::size_t bad = n - 1;
    std::vector<Status> seen(n);
    const Status s = Threads::run(n, [&](Threads& comm) -> Status {
      if (comm.rank() == bad) {
        std::array<float, 4> v{};
        return comm.broadcast(std::span(v), 99);  // invalid root: returned, nothing waits on it
      }
      std::array<float, 4> v{};
      seen[comm.rank()] = comm.all_reduce(std::span(v), polycoll::sum);  // waits for `bad`
      return seen[comm.rank()];
    });
    REQUIRE_FALSE(s);
    INFO(s.error().message);
    CHECK(s.error().code == Errc::invalid_argument);
    const std::string head = "Threads::run(n=" + std::to_string(n) + ") [threads]: rank " + std::to_string(bad) +
                             " returned: broadcast(count=4, dtype=f32, root=99) on rank " + std::to_string(bad) +
                             " of " + std::to_string(n) + " [threads]: root 99 out of range";
    CHECK(s.error().message.rfind(head, 0) == 0);
    for (std::size_t r = 0; r < bad; ++r) {
      INFO("rank " << r);
      REQUIRE_FALSE(seen[r]);
      INFO(seen[r].error().message);
      CHECK(seen[r].error().code == Errc::aborted);
      CHECK(contains(seen[r].error().message, "rank " + std::to_string(bad) + " returned: broadcast("));
    }
  }
}

TEST_CASE("run: the first failure in time wins, not the lowest rank", "[threads][run][errors]") {
  // Rank 2 gives up; rank 0 and 1 then fail too (their barrier is aborted,
  // which they return): run names rank 2, the cause.
  const Status s = Threads::run(3, [](Threads& comm) -> Status {
    if (comm.rank() == 2) return polycoll::fail(Errc::timeout, "rank 2's own deadline passed");
    return comm.barrier();
  });
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::timeout);
  CHECK(s.error().message == "Threads::run(n=3) [threads]: rank 2 returned: rank 2's own deadline passed");
}

TEST_CASE("run: a returned failure keeps its native code; ranks that threw after it are named",
          "[threads][run][errors]") {
  const Status s = Threads::run(2, [](Threads& comm) -> Status {
    if (comm.rank() == 1) return polycoll::fail(Errc::backend_failure, "device lost", 42);
    if (!comm.barrier()) throw std::runtime_error("barrier failed");
    return {};
  });
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::backend_failure);
  CHECK(s.error().native == 42);
  CHECK(s.error().message ==
        "Threads::run(n=2) [threads]: rank 1 returned: device lost; then rank 0 threw: barrier failed");
}

TEST_CASE("run: a throw before any returned failure keeps run's thrower report", "[threads][run][errors]") {
  const Status s = Threads::run(2, [](Threads& comm) -> Status {
    if (comm.rank() == 0) throw std::runtime_error("first");
    if (auto st = comm.barrier(); !st) return st;  // aborted by rank 0's throw: a later failure
    return {};
  });
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::aborted);
  CHECK(contains(s.error().message, "Threads::run(n=2) [threads]: rank 0 threw: first"));
  CHECK_FALSE(contains(s.error().message, "rank 1 returned"));
}

TEST_CASE("run: a rank returning a failure without waiting on anyone does not disturb finished ranks",
          "[threads][run][errors]") {
  // Rank 0 finishes its work and returns success before rank 1 fails: run
  // still reports rank 1, and rank 0's success stands.
  std::atomic<bool> zero_done{false};
  const Status s = Threads::run(2, [&](Threads& comm) -> Status {
    if (comm.rank() == 0) {
      zero_done = true;
      return {};
    }
    while (!zero_done) std::this_thread::yield();
    return polycoll::fail(Errc::mismatch, "late");
  });
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::mismatch);
  CHECK(s.error().message == "Threads::run(n=2) [threads]: rank 1 returned: late");
}

}  // namespace

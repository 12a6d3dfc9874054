// Reliability of the Mpi backend (docs/reliability.md): op_timeout bounds
// every blocking collective and split, the consistency check turns mismatched
// calls into Errc::mismatch on every rank, a rank that skips a collective is
// reported, and the load cases (100,000 small collectives with flat memory,
// four threads submitting to one communicator) stay right. Every rank runs
// every case; the fault cases need at least two ranks (one rank: skipped).
#include <catch2/catch.hpp>

#include <polycoll/backends/mpi.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../count_allocations.hpp"
#include "common.hpp"

using polycoll::test::g_allocations;

namespace {

using namespace polycoll;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using polycoll::test::contains;
using polycoll::test::world;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Resident set size in bytes (Linux).
std::size_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * 4096ul : 0;
}

// Rank 0 tells every other rank to go on (MPI_COMM_WORLD, outside polycoll's communicator).
void release_others(const Mpi& comm) {
  int go = 1;
  for (std::size_t q = 1; q < comm.world_size(); ++q) MPI_Send(&go, 1, MPI_INT, static_cast<int>(q), 4242, MPI_COMM_WORLD);
}
void wait_for_rank0() {
  int go = 0;
  MPI_Recv(&go, 1, MPI_INT, 0, 4242, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

Status sync_until_done(Mpi& comm) {
  Status s = comm.sync();
  for (int i = 0; i < 300 && !s && s.error().code == Errc::timeout; ++i) s = comm.sync();
  return s;
}

constexpr auto timeout = 200ms;
// The bound the issue demands (timeout + 10%), plus scheduling slack on a
// loaded two-core machine (sanitizer builds included; with a build beside
// the tests, Open MPI's barrier once returned after 300.4 ms and a call 0.2
// ms past the old 60 ms of slack). Below twice the timeout: a timeout that
// does not fire, or fires a whole timeout late (two deadlines one after the
// other), still fails.
constexpr auto bound = timeout + timeout / 10 + 150ms;
static_assert(bound < 2 * timeout);

// One blocking collective of each kind, on buffers owned by the case. Every
// rank but 0 is "late": it makes the call only after rank 0 timed out.
struct Case {
  const char* name;
  const char* expect;  // in rank 0's message: the pending call
  std::function<Status(Mpi&)> call;
  std::function<bool(const Mpi&)> result_ok;  // rank 0's result once completed
};

TEST_CASE("op_timeout: every blocking collective a peer is late for times out on time, listing it; the late call "
          "completes it", "[mpi][timeout][fault]") {
  Mpi probe = world();
  const std::size_t w = probe.world_size(), r = probe.rank();
  if (w < 2) {
    WARN("needs two ranks");
    return;
  }
  Options o;
  o.op_timeout = timeout;
  Mpi comm = world(o);
  // Buffers sized for any world: 4 elements per rank.
  std::vector<std::int32_t> a(4 * w), b(4 * w);
  std::vector<std::size_t> counts(w, 2), displs(w);
  for (std::size_t q = 0; q < w; ++q) displs[q] = 2 * q;
  auto fill = [&] {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(10 * (r + 1) + i);
    std::fill(b.begin(), b.end(), -1);
  };
  const auto n = static_cast<std::int32_t>(w);
  const std::int32_t rank_sum = n * (n + 1) / 2;  // sum of (r + 1)
  std::vector<Case> cases = {
      {"all_reduce", "all_reduce(count=4, dtype=i32, op=sum)",
       [&](Mpi& c) { return c.all_reduce(std::span<std::int32_t>(a.data(), 4), polycoll::sum); },
       [&](const Mpi&) { return a[1] == 10 * rank_sum + n * 1; }},
      {"broadcast from a late root", "broadcast(count=4, dtype=i32, root=1)",
       [&](Mpi& c) { return c.broadcast(std::span<std::int32_t>(a.data(), 4), 1); },
       [&](const Mpi&) { return a[2] == 22; }},
      {"all_gather", "all_gather(count=2, dtype=i32)",
       [&](Mpi& c) { return c.all_gather(std::span<const std::int32_t>(a.data(), 2), std::span<std::int32_t>(b.data(), 2 * w)); },
       [&](const Mpi&) { return b[2] == 20 && b[3] == 21; }},
      {"reduce_scatter", "reduce_scatter(count=2, dtype=i32, op=sum)",
       [&](Mpi& c) { return c.reduce_scatter(std::span<const std::int32_t>(a.data(), 2 * w), std::span<std::int32_t>(b.data(), 2), polycoll::sum); },
       [&](const Mpi&) { return b[1] == 10 * rank_sum + n * 1; }},
      {"reduce to rank 0", "reduce(count=4, dtype=i32, op=max, root=0)",
       [&](Mpi& c) { return c.reduce(std::span<const std::int32_t>(a.data(), 4), std::span<std::int32_t>(b.data(), 4), polycoll::max, 0); },
       [&](const Mpi&) { return b[3] == 10 * n + 3; }},
      {"gather to rank 0", "gather(count=2, dtype=i32, root=0)",
       [&](Mpi& c) { return c.gather(std::span<const std::int32_t>(a.data(), 2), std::span<std::int32_t>(b.data(), 2 * w), 0); },
       [&](const Mpi&) { return b[2] == 20 && b[3] == 21; }},
      {"scatter from a late root", "scatter(count=2, dtype=i32, root=1)",
       [&](Mpi& c) { return c.scatter(std::span<const std::int32_t>(a.data(), 2 * w), std::span<std::int32_t>(b.data(), 2), 1); },
       [&](const Mpi&) { return b[0] == 20 && b[1] == 21; }},
      {"all_to_all", "all_to_all(count=2, dtype=i32)",
       [&](Mpi& c) { return c.all_to_all(std::span<const std::int32_t>(a.data(), 2 * w), std::span<std::int32_t>(b.data(), 2 * w)); },
       [&](const Mpi&) { return b[2] == 20 && b[3] == 21; }},
      {"all_gather_v", "all_gather_v(count=",
       [&](Mpi& c) { return c.all_gather_v(std::span<const std::int32_t>(a.data(), 2), std::span<std::int32_t>(b.data(), 2 * w), counts, displs); },
       [&](const Mpi&) { return b[2] == 20 && b[3] == 21; }},
      {"all_to_all_v", "all_to_all_v(dtype=i32)",
       [&](Mpi& c) { return c.all_to_all_v(std::span<const std::int32_t>(a.data(), 2 * w), counts, std::span<std::int32_t>(b.data(), 2 * w), counts); },
       [&](const Mpi&) { return b[2] == 20 && b[3] == 21; }},
  };
  for (const Case& k : cases) {
    SECTION(k.name) {
      fill();
      if (r == 0) {
        const auto t0 = Clock::now();
        const Status s = k.call(comm);
        const auto took = Clock::now() - t0;
        REQUIRE_FALSE(s);
        INFO(s.error().message);
        CHECK(s.error().code == Errc::timeout);
        CHECK(contains(s.error().message, "timed out after 200 ms"));
        CHECK(contains(s.error().message, "pending: #"));
        CHECK(contains(s.error().message, k.expect));
        CHECK(contains(s.error().message, "on rank 0 of " + std::to_string(w) + " [mpi]"));
        CHECK(took >= timeout);
        CHECK(took <= bound);
        WARN(k.name << ": Errc::timeout after " << ms(took) << " ms (op_timeout 200 ms)");
        CHECK(comm.pending() == 1);
        release_others(comm);
        // The late ranks' calls match the posted collective: sync completes it.
        REQUIRE(sync_until_done(comm));
        CHECK(comm.pending() == 0);
        CHECK(k.result_ok(comm));
      } else {
        wait_for_rank0();
        const Status s = k.call(comm);
        INFO((s ? std::string() : s.error().message));
        CHECK(s);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

TEST_CASE("op_timeout: split and barrier with a late peer time out on time", "[mpi][timeout][fault]") {
  Mpi probe = world();
  const std::size_t w = probe.world_size(), r = probe.rank();
  if (w < 2) {
    WARN("needs two ranks");
    return;
  }
  Options o;
  o.op_timeout = timeout;
  Mpi comm = world(o);
  SECTION("split") {
    if (r == 0) {
      const auto t0 = Clock::now();
      auto s = comm.split(0, 0);
      const auto took = Clock::now() - t0;
      REQUIRE_FALSE(s);
      INFO(s.error().message);
      CHECK(s.error().code == Errc::timeout);
      CHECK(contains(s.error().message, "split()"));
      CHECK(contains(s.error().message, "pending: #"));
      CHECK(took >= timeout);
      CHECK(took <= bound);
      WARN("split: Errc::timeout after " << ms(took) << " ms (op_timeout 200 ms)");
      release_others(comm);
      // Rank 0 gave up before MPI_Comm_split, so a late split() would wait
      // for it in MPI_Comm_split forever (docs/reliability.md); the late ranks
      // complete the (color, key) exchange rank 0 left posted instead.
      REQUIRE(sync_until_done(comm));
    } else {
      wait_for_rank0();
      std::array<std::uint64_t, 2> mine{0, 0};
      std::vector<std::uint64_t> all(2 * w);
      // Nonblocking, like the exchange it completes: MPI never matches a
      // blocking collective with a nonblocking one.
      MPI_Request req = MPI_REQUEST_NULL;
      REQUIRE(MPI_Iallgather(mine.data(), 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm.native(), &req) ==
              MPI_SUCCESS);
      REQUIRE(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // The communicator still works.
    std::array<int, 1> one{1};
    REQUIRE(comm.all_reduce(one, polycoll::sum));
    CHECK(one[0] == static_cast<int>(w));
  }
  SECTION("barrier") {
    if (r == 0) {
      const auto t0 = Clock::now();
      const Status s = comm.barrier();
      const auto took = Clock::now() - t0;
      REQUIRE_FALSE(s);
      CHECK(s.error().code == Errc::timeout);
      CHECK(contains(s.error().message, "barrier()"));
      CHECK(took <= bound);
      WARN("barrier: Errc::timeout after " << ms(took) << " ms (op_timeout 200 ms)");
      release_others(comm);
      REQUIRE(sync_until_done(comm));
    } else {
      wait_for_rank0();
      REQUIRE(comm.barrier());
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The status board (backends/mpi/board.hpp): the last rank stalls in a
// receive on another communicator after collective #2; the others' #3 times
// out, and its message names the last rank as not arrived, with the last
// collective it entered here. Every rank of this run is on one node.
TEST_CASE("op_timeout: the timeout names the ranks that have not arrived and what each entered last",
          "[mpi][timeout][fault][board]") {
  Options o;
  o.op_timeout = timeout;
  o.drop_timeout = 2000ms;
  Mpi comm = world(o);
  Mpi side = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  if (w < 2) {
    WARN("needs two ranks");
    return;
  }
  {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int k = 0;
    MPI_Comm_size(node, &k);
    MPI_Comm_free(&node);
    int all_here = k == static_cast<int>(w) ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_here, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_here == 0) {
      WARN("the ranks are on several nodes: the board shows only a node's own ranks");
      return;
    }
  }
  std::array<float, 4> v{};
  v.fill(1.0f);
  REQUIRE(comm.broadcast(std::span<float>(v), 0));    // #1
  REQUIRE(comm.all_reduce(v, polycoll::max));         // #2
  const std::size_t late = w - 1;
  if (r == late) {
    // Stalls in another call, on another communicator, until rank 0 sends.
    std::array<int, 1> go{};
    REQUIRE(side.recv(std::span<int>(go), 0, 7));
    REQUIRE(side.sync());
    v.fill(1.0f);
    REQUIRE(comm.all_reduce(v, polycoll::sum));  // #3, late: the others' posted ones complete
  } else {
    v.fill(1.0f);
    const Status s = comm.all_reduce(v, polycoll::sum);  // #3
    REQUIRE_FALSE(s);
    INFO(s.error().message);
    CHECK(s.error().code == Errc::timeout);
    const std::string l = std::to_string(late);
    CHECK(contains(s.error().message, "rank(s) " + l + " have not entered this collective (#3 on this communicator)"));
    CHECK(contains(s.error().message, "rank " + l + "'s last collective: #2 all_reduce"));
    // The ranks that did arrive are not named.
    for (std::size_t q = 0; q + 1 < w; ++q) {
      CHECK_FALSE(contains(s.error().message, "rank " + std::to_string(q) + "'s last collective"));
    }
    // Rank 0 releases the late rank only once every other rank has read
    // the board: released earlier, the late rank could enter #3 before a
    // slower rank's timeout reads the board (seen oversubscribed, 3 ranks
    // on 2 busy cores, Open MPI), which then says every rank has entered.
    if (r != 0) {
      std::array<int, 1> read{1};
      REQUIRE(side.send(std::span<const int>(read), 0, 8));
      REQUIRE(side.sync());
    } else {
      for (std::size_t q = 1; q < late; ++q) {
        std::array<int, 1> read{};
        REQUIRE(side.recv(std::span<int>(read), q, 8));
      }
      REQUIRE(side.sync());
      std::array<int, 1> go{1};
      REQUIRE(side.send(std::span<const int>(go), late, 7));
      REQUIRE(side.sync());
    }
    REQUIRE(sync_until_done(comm));
  }
  CHECK(v[3] == static_cast<float>(w));
  // Every rank here before the communicators go: the board is freed together.
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a rank that skips the last collective of a loop: the others time out naming it", "[mpi][timeout][fault]") {
  Options o;
  o.op_timeout = timeout;
  o.drop_timeout = 50ms;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  if (w < 2) {
    WARN("needs two ranks");
    return;
  }
  constexpr int iters = 10;
  std::array<float, 8> v{};
  Status last;
  int done = 0;
  for (int i = 0; i < iters; ++i) {
    if (r == w - 1 && i == iters - 1) break;  // the last rank skips the last call
    v.fill(1.0f);
    last = comm.all_reduce(v, polycoll::sum);
    if (!last) break;
    ++done;
  }
  if (r == w - 1) {
    CHECK(done == iters - 1);
  } else {
    CHECK(done == iters - 1);
    REQUIRE_FALSE(last);
    INFO(last.error().message);
    CHECK(last.error().code == Errc::timeout);
    CHECK(contains(last.error().message, "all_reduce(count=8, dtype=f32, op=sum)"));
    CHECK(contains(last.error().message, "pending: #" + std::to_string(iters)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == w - 1) {
    v.fill(1.0f);
    REQUIRE(comm.all_reduce(v, polycoll::sum));  // the skipped call, late: the others' posted ones complete
  } else {
    REQUIRE(sync_until_done(comm));
  }
  CHECK(v[7] == static_cast<float>(w));
  MPI_Barrier(MPI_COMM_WORLD);
}

// Runs `mine` on this rank, expecting Errc::mismatch naming `theirs` for each other rank.
void expect_mismatch(const Status& s, const std::string& mine_text, const std::string& theirs_text, std::size_t r,
                     std::size_t w) {
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::mismatch);
  CHECK(contains(s.error().message, "consistency check failed"));
  CHECK(contains(s.error().message, mine_text));
  CHECK(contains(s.error().message, theirs_text));
  CHECK(contains(s.error().message, "on rank " + std::to_string(r) + " of " + std::to_string(w) + " [mpi]"));
}

TEST_CASE("consistency check: count, op, dtype, root and call mismatches are Errc::mismatch on every rank",
          "[mpi][check][fault]") {
  Options o;
  o.check_consistency = true;
  o.op_timeout = 5s;  // a bug here must fail, not hang
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  if (w < 2) {
    // One rank always agrees with itself: calls work with the check on.
    std::array<int, 3> v{1, 2, 3};
    REQUIRE(comm.all_reduce(v, polycoll::sum));
    CHECK(v[2] == 3);
    return;
  }
  const bool odd = r == w - 1;  // the rank that calls something else
  std::uint64_t seq = 0;        // collectives so far (the fingerprints' sequence number)
  std::vector<float> f(8 * w, 1.0f), g(8 * w);
  std::vector<double> d(8, 1.0);
  const std::string other = "rank " + std::to_string(w - 1) + " called #";
  const std::string first = "rank 0 called #";
  auto theirs = [&](const std::string& text) { return (odd ? first : other) + std::to_string(seq) + " " + text; };

  SECTION("count") {
    ++seq;
    const Status s = comm.all_reduce(std::span<float>(f.data(), odd ? 5 : 4), polycoll::sum);
    expect_mismatch(s, "all_reduce(count=", theirs(odd ? "all_reduce(count=4, dtype=f32, op=sum)"
                                                       : "all_reduce(count=5, dtype=f32, op=sum)"), r, w);
  }
  SECTION("op") {
    ++seq;
    const Status s = odd ? comm.all_reduce(std::span<float>(f.data(), 4), polycoll::max)
                         : comm.all_reduce(std::span<float>(f.data(), 4), polycoll::sum);
    expect_mismatch(s, "all_reduce(count=4", theirs(odd ? "all_reduce(count=4, dtype=f32, op=sum)"
                                                        : "all_reduce(count=4, dtype=f32, op=max)"), r, w);
  }
  SECTION("dtype") {
    ++seq;
    const Status s = odd ? comm.all_reduce(std::span<double>(d.data(), 4), polycoll::sum)
                         : comm.all_reduce(std::span<float>(f.data(), 4), polycoll::sum);
    expect_mismatch(s, "all_reduce(count=4", theirs(odd ? "all_reduce(count=4, dtype=f32, op=sum)"
                                                        : "all_reduce(count=4, dtype=f64, op=sum)"), r, w);
  }
  SECTION("root") {
    ++seq;
    const Status s = comm.broadcast(std::span<float>(f.data(), 3), odd ? 1 : 0);
    expect_mismatch(s, "broadcast(count=3", theirs(odd ? "broadcast(count=3, dtype=f32, root=0)"
                                                       : "broadcast(count=3, dtype=f32, root=1)"), r, w);
  }
  SECTION("a skipped collective: the next call differs") {
    // Every rank makes one all_reduce; the odd rank then skips the second
    // all_reduce and calls all_gather: call #2 differs.
    ++seq;
    REQUIRE(comm.all_reduce(std::span<float>(f.data(), 2), polycoll::sum));
    ++seq;
    const Status s = odd ? comm.all_gather(std::span<const float>(f.data(), 2), std::span<float>(g.data(), 2 * w))
                         : comm.all_reduce(std::span<float>(f.data(), 2), polycoll::sum);
    expect_mismatch(s, odd ? "all_gather(count=2" : "all_reduce(count=2",
                    theirs(odd ? "all_reduce(count=2, dtype=f32, op=sum)" : "all_gather(count=2, dtype=f32)"), r, w);
  }
  SECTION("split, barrier and the new collectives are checked too") {
    ++seq;
    if (odd) {
      expect_mismatch(comm.barrier(), "barrier()", theirs("reduce(count=4, dtype=f32, op=sum, root=0)"), r, w);
    } else {
      expect_mismatch(comm.reduce(std::span<const float>(f.data(), 4), std::span<float>(g.data(), 4), polycoll::sum, 0),
                      "reduce(count=4", theirs("barrier()"), r, w);
    }
    ++seq;
    if (odd) {
      auto s = comm.split(1, 0);
      REQUIRE_FALSE(s);
      expect_mismatch(tl::unexpected(s.error()), "split()", theirs("scatter(count=2, dtype=f32, root=0)"), r, w);
    } else {
      expect_mismatch(comm.scatter(std::span<const float>(f.data(), 2 * w), std::span<float>(g.data(), 2), 0),
                      "scatter(count=2", theirs("split()"), r, w);
    }
  }
  // After any mismatch the ranks are still in step: matching calls work.
  std::array<int, 2> one{1, 1};
  REQUIRE(comm.all_reduce(one, polycoll::sum));
  CHECK(one[1] == static_cast<int>(w));
  MPI_Barrier(MPI_COMM_WORLD);
}

// Without op_timeout, every rank on one node (2 ranks: the 2-rank window; 3
// or more: the node window): once the first all_reduce made the
// shared-memory window, the check travels through it (a window all_reduce
// carries its fingerprint with its operand in one line; every other call
// sends its fingerprint alone through the same line). Each mismatch pairs
// one path with another, and each must be Errc::mismatch on every rank
// naming another's call. No op_timeout (it would take the window out of
// play), so a broken check hangs until meson's test timeout.
TEST_CASE("consistency check through the shared-memory window: every pairing of paths",
          "[mpi][check][window]") {
  Options o;
  o.check_consistency = true;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  if (w < 2) return;  // one rank agrees with itself
  const bool odd = r == w - 1;  // the rank that calls something else
  std::uint64_t seq = 0;
  auto theirs = [&](const std::string& text) {
    return (odd ? std::string("rank 0 called #") : "rank " + std::to_string(w - 1) + " called #") +
           std::to_string(seq) + " " + text;
  };
  // f32 counts: 10 = 40 bytes (in the line with the fingerprint), 12 = 48 and
  // 14 = 56 bytes (in the line without the check; with it, one phase through
  // the buffer set), 256 = 1 KiB (one phase), 16384 = 64 KiB (halves at 2
  // ranks, reduce-scatter + all-gather at 3 or more).
  std::vector<float> a(16384 + 1), b(16384 + 1);
  auto fill = [&] {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7 + 1);
  };
  auto reduce = [&](std::size_t n) {
    return comm.all_reduce(std::span<float>(a.data(), n), polycoll::sum);
  };
  const auto ranks_sum = static_cast<float>(w * (w + 1) / 2);
  auto right = [&](std::size_t n) {  // the sum over the ranks of (rank + 1) * (i % 7 + 1)
    for (std::size_t i = 0; i < n; ++i) {
      if (a[i] != ranks_sum * static_cast<float>(i % 7 + 1)) return false;
    }
    return true;
  };
  // The first window all_reduce makes the window (its check goes through MPI).
  fill();
  ++seq;
  REQUIRE(reduce(16384));
  CHECK(right(16384));
  if (comm.shared_window_bytes() == 0) {
    // Ranks on different nodes, or an MPI without a unified shared window:
    // the check all-gathers, which the case above covers.
    WARN("no shared-memory window between the ranks: nothing to check here");
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  // Checked results through each window algorithm.
  for (std::size_t n : {1, 10, 11, 12, 14, 256, 4096, 16384}) {
    fill();
    ++seq;
    REQUIRE(reduce(n));
    INFO("count " << n);
    CHECK(right(n));
  }
  SECTION("in the line, op differs") {
    ++seq;
    const Status s = odd ? comm.all_reduce(std::span<float>(a.data(), 10), polycoll::max) : reduce(10);
    expect_mismatch(s, "all_reduce(count=10", theirs(odd ? "all_reduce(count=10, dtype=f32, op=sum)"
                                                         : "all_reduce(count=10, dtype=f32, op=max)"), r, w);
  }
  SECTION("in the line against one phase, count differs") {
    ++seq;
    const Status s = reduce(odd ? 14 : 10);
    expect_mismatch(s, "all_reduce(count=", theirs(odd ? "all_reduce(count=10, dtype=f32, op=sum)"
                                                       : "all_reduce(count=14, dtype=f32, op=sum)"), r, w);
  }
  SECTION("halves against a broadcast (the fingerprint alone)") {
    ++seq;
    const Status s = odd ? comm.broadcast(std::span<float>(a.data(), 3), 0) : reduce(16384);
    expect_mismatch(s, odd ? "broadcast(count=3" : "all_reduce(count=16384",
                    theirs(odd ? "all_reduce(count=16384, dtype=f32, op=sum)" : "broadcast(count=3, dtype=f32, root=0)"),
                    r, w);
  }
  SECTION("a barrier against an all_reduce in the line") {
    ++seq;
    const Status s = odd ? comm.barrier() : reduce(1);
    expect_mismatch(s, odd ? "barrier()" : "all_reduce(count=1",
                    theirs(odd ? "all_reduce(count=1, dtype=f32, op=sum)" : "barrier()"), r, w);
  }
  SECTION("fingerprints alone on both sides: broadcast roots, barrier against reduce, empty all_reduce") {
    ++seq;
    const Status s1 = comm.broadcast(std::span<float>(a.data(), 3), odd ? 1 : 0);
    expect_mismatch(s1, "broadcast(count=3", theirs(odd ? "broadcast(count=3, dtype=f32, root=0)"
                                                        : "broadcast(count=3, dtype=f32, root=1)"), r, w);
    ++seq;  // a second mismatch right after the first
    const Status s2 = odd ? comm.barrier() : comm.reduce(std::span<const float>(a.data(), 4), std::span<float>(b.data(), 4),
                                                         polycoll::sum, 0);
    expect_mismatch(s2, odd ? "barrier()" : "reduce(count=4",
                    theirs(odd ? "reduce(count=4, dtype=f32, op=sum, root=0)" : "barrier()"), r, w);
    ++seq;  // count 0 takes no window algorithm: its fingerprint goes alone, against one in the line
    const Status s3 = reduce(odd ? 0 : 1);
    expect_mismatch(s3, "all_reduce(count=", theirs(odd ? "all_reduce(count=1, dtype=f32, op=sum)"
                                                        : "all_reduce(count=0, dtype=f32, op=sum)"), r, w);
  }
  SECTION("out of place: a mismatch leaves recv untouched") {
    ++seq;
    std::vector<float> recv(256, -7.0f);
    fill();
    const Status s = comm.all_reduce(std::span<const float>(a.data(), odd ? 256 : 255),
                                     std::span<float>(recv.data(), odd ? 256 : 255), polycoll::sum);
    expect_mismatch(s, "all_reduce(count=", theirs(odd ? "all_reduce(count=255, dtype=f32, op=sum)"
                                                       : "all_reduce(count=256, dtype=f32, op=sum)"), r, w);
    CHECK(std::all_of(recv.begin(), recv.end(), [](float x) { return x == -7.0f; }));
    // And a matching one reduces into recv, leaving send alone, through each algorithm.
    for (std::size_t n : {10, 256, 16384}) {
      std::vector<float> out(n, -7.0f);
      fill();
      REQUIRE(comm.all_reduce(std::span<const float>(a.data(), n), std::span<float>(out), polycoll::sum));
      CHECK(a[n - 1] == static_cast<float>(r + 1) * static_cast<float>((n - 1) % 7 + 1));
      std::copy(out.begin(), out.end(), a.begin());
      INFO("count " << n);
      CHECK(right(n));
    }
  }
  SECTION("an all_reduce that would grow the window against one it carries as it is") {
    // The largest message each window takes: it grows the window.
    std::vector<float> big((w == 2 ? detail::mpi::shm_to_bytes : detail::mpi::node_shm_to_bytes(w)) / 4);
    const std::string n = std::to_string(big.size());
    ++seq;
    const Status s = odd ? comm.all_reduce(std::span<float>(big), polycoll::sum) : reduce(256);
    expect_mismatch(s, odd ? "all_reduce(count=" + n : "all_reduce(count=256",
                    theirs(odd ? "all_reduce(count=256, dtype=f32, op=sum)" : "all_reduce(count=" + n + ", dtype=f32, op=sum)"),
                    r, w);
  }
  // After any mismatch the ranks are still in step: matching calls work,
  // through every window algorithm.
  for (std::size_t n : {10, 14, 16384}) {
    fill();
    REQUIRE(reduce(n));
    CHECK(right(n));
  }
  REQUIRE(comm.barrier());
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("consistency check: POLYCOLL_CHECK=1 switches it on", "[mpi][check]") {
  ::setenv("POLYCOLL_CHECK", "1", 1);
  Mpi comm = world();
  ::unsetenv("POLYCOLL_CHECK");
  Mpi unchecked = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  std::array<std::int64_t, 4> v{};
  v.fill(1);
  const Status s = comm.all_reduce(std::span<std::int64_t>(v.data(), w > 1 && r == w - 1 ? 3 : 4), polycoll::sum);
  if (w > 1) {
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::mismatch);
  } else {
    CHECK(s);
  }
  v.fill(1);
  REQUIRE(unchecked.all_reduce(v, polycoll::sum));
  CHECK(v[3] == static_cast<std::int64_t>(w));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("consistency check: ranks that disagree about Options::reproducible are Errc::mismatch on every rank",
          "[mpi][check][reproducible]") {
  Mpi probe = world();
  const std::size_t w = probe.world_size(), r = probe.rank();
  Options o;
  o.check_consistency = true;
  o.reproducible = r == 0;  // rank 0 alone folds in rank order
  Mpi comm = world(o);
  std::array<float, 4> v{1, 2, 3, 4};
  const Status s = comm.all_reduce(std::span<float>(v), polycoll::sum);
  if (w > 1) {
    REQUIRE_FALSE(s);
    INFO(s.error().message);
    CHECK(s.error().code == Errc::mismatch);
    if (r == 0) {
      CHECK(contains(s.error().message, "#1 all_reduce(count=4, dtype=f32, op=sum, reproducible=true) on rank 0"));
      CHECK(contains(s.error().message, "rank 1 called #1 all_reduce(count=4, dtype=f32, op=sum)"));
    } else {
      CHECK(contains(s.error().message, "rank 0 called #1 all_reduce(count=4, dtype=f32, op=sum, reproducible=true)"));
    }
  } else {
    CHECK(s);
  }
  // Movement calls carry no flag: they match.
  REQUIRE(comm.broadcast(std::span<float>(v), 0));
  MPI_Barrier(MPI_COMM_WORLD);
}

// g++ says __SANITIZE_ADDRESS__/__SANITIZE_THREAD__, clang 14 only __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POLYCOLL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define POLYCOLL_TEST_SANITIZED 1
#endif
#endif

#ifdef POLYCOLL_TEST_SANITIZED
constexpr int load_calls = 20'000;  // sanitizer builds: the same loop, shorter
// MPICH's own malloc/free per call (not operator new: the count stays 0) go
// through the sanitizer's quarantine of freed blocks, so RSS grows by design.
constexpr bool rss_meaningful = false;
#else
constexpr int load_calls = 100'000;
constexpr bool rss_meaningful = true;
#endif

TEST_CASE("load: 100,000 small collectives, every result right, memory flat", "[mpi][load]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  const auto n = static_cast<std::int32_t>(w);
  std::array<std::int32_t, 4> v{};
  std::vector<std::int32_t> g(4 * w), h(4 * w);
  int wrong = 0;
  auto step = [&](int i) {
    const auto k = static_cast<std::int32_t>(i & 0xff);
    switch (i & 3) {
      case 0:
        v.fill(static_cast<std::int32_t>(r) + k);
        if (!comm.all_reduce(v, polycoll::sum) || v[3] != n * (n - 1) / 2 + n * k) ++wrong;
        break;
      case 1:
        v.fill(r == 0 ? k : -1);
        if (!comm.broadcast(v, 0) || v[2] != k) ++wrong;
        break;
      case 2:
        v.fill(static_cast<std::int32_t>(r) + k);
        if (!comm.all_gather(std::span<const std::int32_t>(v.data(), 2), std::span<std::int32_t>(g.data(), 2 * w)) ||
            g[2 * w - 1] != n - 1 + k) {
          ++wrong;
        }
        break;
      default:
        std::fill(h.begin(), h.end(), k);
        if (!comm.reduce_scatter(std::span<const std::int32_t>(h.data(), 2 * w), std::span<std::int32_t>(v.data(), 2),
                                 polycoll::sum) ||
            v[1] != n * k) {
          ++wrong;
        }
        break;
    }
  };
  for (int i = 0; i < 1000; ++i) step(i);  // warm-up: cached ops, MPI's lazily made buffers
  const std::size_t rss0 = rss_bytes();
  const std::size_t allocs0 = g_allocations.load();
  const auto t0 = Clock::now();
  for (int i = 0; i < load_calls; ++i) step(i);
  const auto took = Clock::now() - t0;
  const std::size_t allocs = g_allocations.load() - allocs0;
  const std::size_t rss1 = rss_bytes();
  CHECK(wrong == 0);
  CHECK(allocs == 0);
  const long long grew = static_cast<long long>(rss1) - static_cast<long long>(rss0);
  if (rss_meaningful) CHECK(grew < 1024 * 1024);
  WARN(load_calls << " collectives on " << w << " rank(s): " << ms(took) << " ms, " << allocs
                  << " allocations, RSS " << rss0 / 1024 << " -> " << rss1 / 1024 << " KiB");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("load: 4 threads submit to one communicator at once", "[mpi][load][threads]") {
  Mpi comm = world();
  if (comm.serialized()) WARN("MPI provides less than MPI_THREAD_MULTIPLE: polycoll serializes");
  const std::size_t w = comm.world_size(), r = comm.rank();
  const auto n = static_cast<std::int32_t>(w);
  constexpr int threads = 4, iters = 500;
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      // Collectives: the threads of a rank make identical calls, so whichever
      // order each rank's lock admits them in, every result is the same.
      std::array<std::int32_t, 8> v{};
      for (int i = 0; i < iters; ++i) {
        v.fill(static_cast<std::int32_t>(r) + 1);
        if (!comm.all_reduce(v, polycoll::sum) || v[7] != n * (n + 1) / 2) ++wrong;
      }
      // Point to point with a tag per thread: the pairing is exact. Each thread
      // posts all its pairs, then syncs: sync() is rank-wide, so a thread that
      // synced between rounds would wait for other threads' receives whose
      // senders sit in a sync of their own (docs/mpi.md: that cycle deadlocks,
      // and under ASan it did, at 2 ranks).
      const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
      constexpr int pairs = iters / 10;
      std::vector<std::array<std::int32_t, 4>> out(pairs), in(pairs);
      const auto tag = static_cast<std::uint32_t>(100 + t);
      for (int i = 0; i < pairs; ++i) {
        out[static_cast<std::size_t>(i)].fill(static_cast<std::int32_t>(1000 * r + 10 * t + (i & 7)));
        in[static_cast<std::size_t>(i)].fill(-1);
        if (!comm.send(std::span<const std::int32_t>(out[static_cast<std::size_t>(i)]), next, tag) ||
            !comm.recv(std::span<std::int32_t>(in[static_cast<std::size_t>(i)]), prev, tag)) {
          ++wrong;
        }
      }
      // sync() is communicator-wide: it may also complete other threads' work, fine.
      if (!comm.sync()) ++wrong;
      for (int i = 0; i < pairs; ++i) {
        if (in[static_cast<std::size_t>(i)][3] != static_cast<std::int32_t>(1000 * prev + 10 * t + (i & 7))) ++wrong;
      }
    });
  }
  for (auto& t : ts) t.join();
  REQUIRE(comm.sync());
  CHECK(wrong == 0);
  CHECK(comm.pending() == 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

// Mpi-specific behaviour: MPI errors, Environment over an initialised MPI,
// borrow/duplicate, split, op_timeout, the drop contract, threads, no
// allocation per call, and (Open MPI builds) Boost.MPI interop. Every rank
// runs every case; expectations hold at any world size.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/mpi.hpp>
#include <polycoll/config.hpp>
#if POLYCOLL_HAS_BOOST_MPI
#include <boost/mpi/collectives.hpp>
#include <boost/mpi/environment.hpp>
#include <polycoll/interop/boost_mpi.hpp>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <complex>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../count_allocations.hpp"
#include "common.hpp"
#include "../reproducible.hpp"

using polycoll::test::g_allocations;

namespace {

using namespace polycoll;
using namespace std::chrono_literals;

using polycoll::test::contains;
using polycoll::test::world;

// Log records captured by the drop-contract test.
std::mutex g_log_mutex;
std::vector<std::string> g_log;
void capture(LogLevel, std::string_view m) noexcept {
  try {
    std::lock_guard lock(g_log_mutex);
    g_log.emplace_back(m);
  } catch (...) {
  }
}

TEST_CASE("a truncated recv names peer, tag and both counts", "[mpi][errors]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::array<float, 8> out{};
  std::array<float, 4> in{};
  REQUIRE(comm.send(out, next, 11));
  REQUIRE(comm.recv(in, prev, 11));
  const Status s = comm.sync();
  REQUIRE_FALSE(s);
  const std::string& m = s.error().message;
  INFO(m);
  CHECK(s.error().code == Errc::truncated);
  CHECK(s.error().native != 0);
  CHECK(contains(m, "recv(count=4, dtype=f32, src=" + std::to_string(prev) + ", tag=11)"));
  CHECK(contains(m, "of " + std::to_string(w) + " [mpi]"));
  CHECK(contains(m, "rank " + std::to_string(prev) + " sent"));
  CHECK(contains(m, "8 elements"));
  CHECK(contains(m, "recv posted for 4 elements"));
  CHECK(contains(m, "MPI_ERR_TRUNCATE"));
  CHECK(comm.pending() == 0);
  CHECK(comm.barrier());
}

TEST_CASE("receives from one (src, tag) get its messages in posting order", "[mpi][p2p]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::array<std::int32_t, 4> first{}, second{}, one{1, 1, 1, 1}, two{2, 2, 2, 2};
  REQUIRE(comm.recv(first, prev, 7));  // nothing sent yet: posted, unmatched
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(comm.send(one, next, 7));
  REQUIRE(comm.send(two, next, 7));
  // Wait until the first message is here, then post the second receive: it
  // must not take the message that belongs to the first.
  for (int here = 0; !here;) MPI_Iprobe(static_cast<int>(prev), 7, comm.native(), &here, MPI_STATUS_IGNORE);
  REQUIRE(comm.recv(second, prev, 7));
  REQUIRE(comm.sync());
  CHECK(first[3] == 1);
  CHECK(second[3] == 2);
  CHECK(comm.barrier());
}

TEST_CASE("the bf16 sum MPI_Op is bit-identical to the reduction unit", "[mpi][ops]") {
  // Every bf16 bit pattern against a strided set of others (NaNs, infinities,
  // subnormals, overflow to inf), odd length, 2-byte aligned start.
  constexpr std::size_t n = 65536 + 1;
  std::vector<std::uint16_t> a(n + 1), b(n + 1);
  for (std::uint32_t stride : {1u, 257u, 4099u, 40503u}) {
    for (std::size_t i = 0; i < n; ++i) {
      a[i + 1] = static_cast<std::uint16_t>(i);
      b[i + 1] = static_cast<std::uint16_t>((i * stride + 12345u) & 0xFFFFu);
    }
    std::vector<bf16> want(n), x(n);
    std::memcpy(static_cast<void*>(want.data()), b.data() + 1, 2 * n);
    std::memcpy(static_cast<void*>(x.data()), a.data() + 1, 2 * n);
    kernels::combine(dtype_tag<DType::BF16>{}, polycoll::sum, want.data(), want.data(), x.data(), n);
    int len = static_cast<int>(n);
    detail::mpi::user_fn<DType::BF16, ReduceOp::Sum>(a.data() + 1, b.data() + 1, &len, nullptr);
    INFO("stride " << stride);
    CHECK(std::memcmp(want.data(), b.data() + 1, 2 * n) == 0);
  }
}

// Every narrow float user op, sum/prod/min/max, against kernels::combine:
// through user_fn (the AVX2 clone on a CPU that has AVX2, when the build does
// not target it) and through reduce_body (the build's own target). Every bit
// pattern of a against a strided set of b (all 65536 x 256 pairs for the 8-bit
// formats), odd length, so NaNs, infinities, subnormals, saturation and
// rounding ties all pass through both code paths.
template <DType D, ReduceOp Op>
void check_user_op_bits() {
  using T = typename dtype_tag<D>::type;
  using Raw = std::conditional_t<sizeof(T) == 1, std::uint8_t, std::uint16_t>;
  constexpr std::size_t patterns = std::size_t{1} << (8 * sizeof(T));
  const std::size_t n = sizeof(T) == 1 ? patterns * patterns + 1 : patterns + 1;
  std::vector<T> a(n), b(n), want(n), via_fn(n), via_body(n);
  for (std::uint32_t stride : {1u, 257u, 4099u, 40503u}) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t j = sizeof(T) == 1 ? i / patterns : (i * stride + 12345u);
      a[i] = std::bit_cast<T>(static_cast<Raw>(i % patterns));
      b[i] = std::bit_cast<T>(static_cast<Raw>(j % patterns));
    }
    // user_fn computes inout = inout OP in (in = a, inout = b): the same order.
    kernels::combine(dtype_tag<D>{}, op_tag<Op>{}, want.data(), b.data(), a.data(), n);
    via_fn = b;
    via_body = b;
    int len = static_cast<int>(n);
    detail::mpi::user_fn<D, Op>(a.data(), via_fn.data(), &len, nullptr);
    detail::mpi::reduce_body<D, Op>(a.data(), via_body.data(), n);
    INFO(name(D) << " " << name(Op) << " stride " << stride);
    CHECK(std::memcmp(want.data(), via_fn.data(), sizeof(T) * n) == 0);
    CHECK(std::memcmp(want.data(), via_body.data(), sizeof(T) * n) == 0);
    if (sizeof(T) == 1) break;  // every pair already
  }
}

template <DType D>
void check_user_ops_bits() {
  check_user_op_bits<D, ReduceOp::Sum>();
  check_user_op_bits<D, ReduceOp::Prod>();
  check_user_op_bits<D, ReduceOp::Min>();
  check_user_op_bits<D, ReduceOp::Max>();
}

TEST_CASE("narrow float user MPI_Ops, dispatched and baseline, are bit-identical to the unit", "[mpi][ops]") {
  check_user_ops_bits<DType::BF16>();
  check_user_ops_bits<DType::F16>();
  check_user_ops_bits<DType::F8E4M3>();
  check_user_ops_bits<DType::F8E5M2>();
}

TEST_CASE("bad input specific to MPI: tag above MPI_TAG_UB, count above INT_MAX", "[mpi][errors]") {
  Mpi comm = world();
  std::array<float, 4> buf{};
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  REQUIRE(flag);
  const auto big_tag = static_cast<std::uint32_t>(*ub) + 1u;
  const Status t = comm.send(std::span<const float>(buf), 0, big_tag);
  REQUIRE_FALSE(t);
  CHECK(t.error().code == Errc::invalid_argument);
  CHECK(contains(t.error().message, "MPI_TAG_UB"));
  // Rejected before MPI touches memory, so a dummy non-null address is fine.
  const std::size_t huge = static_cast<std::size_t>(INT_MAX) + 1;
  const Status c = comm.all_reduce(std::uint64_t{4096}, huge, DType::U8, ReduceOp::Sum);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::unsupported);
  CHECK(contains(c.error().message, "INT_MAX"));
  CHECK(comm.pending() == 0);
  // Factories: a null communicator.
  auto null = Mpi::borrow(MPI_COMM_NULL);
  REQUIRE_FALSE(null);
  CHECK(null.error().code == Errc::invalid_argument);
  CHECK(comm.barrier());
}

// A moved-from Mpi has no world: each call is Errc::invalid_argument saying
// so, including the ones whose peer, root or span size the front end checks
// against the placeholder world of 1 (send(dest=1) said "dest 1 out of range
// [0, 1)"). The peer and root are 1, out of that placeholder range.
TEST_CASE("every call on a moved-from Mpi says it is moved-from", "[mpi][errors][moved]") {
  Mpi a = world();
  Mpi b(std::move(a));
  std::vector<float> v(4), big(12);
  std::vector<std::size_t> counts{4, 4, 4};
  std::size_t bad = 0;
  auto moved = [&](const Status& s, const char* call) {
    const bool ok = !s && s.error().code == Errc::invalid_argument && contains(s.error().message, "moved-from") &&
                    contains(s.error().message, "[mpi]") && !contains(s.error().message, "out of range");
    if (!ok) {
      ++bad;
      UNSCOPED_INFO(call << ": " << (s ? std::string("ok") : s.error().message));
    }
  };
  const auto addr = reinterpret_cast<std::uint64_t>(v.data());
  moved(a.send(addr, 4, DType::F32, 1, 0), "send (seed)");
  moved(a.recv(addr, 4, DType::F32, 1, 0), "recv (seed)");
  moved(a.send(std::span<const float>(v), 1, 0), "send");
  moved(a.recv(std::span(v), 1, 0), "recv");
  moved(a.send_recv(std::span<const float>(v), 1, std::span(v), 1, 0), "send_recv");
  moved(a.broadcast(std::span(v), 1), "broadcast");
  moved(a.reduce(std::span<const float>(v), std::span(v), polycoll::sum, 1), "reduce");
  moved(a.gather(std::span<const float>(v), std::span(big), 1), "gather");
  moved(a.scatter(std::span<const float>(big), std::span(v), 1), "scatter");
  moved(a.all_reduce(std::span(v), polycoll::sum), "all_reduce");
  moved(a.all_gather(std::span<const float>(v), std::span(big)), "all_gather");
  moved(a.reduce_scatter(std::span<const float>(big), std::span(v), polycoll::sum), "reduce_scatter");
  moved(a.all_to_all(std::span<const float>(big), std::span(big)), "all_to_all");
  moved(a.all_gather_v(std::span<const float>(v), std::span(big), counts), "all_gather_v");
  moved(a.group_start(), "group_start");
  moved(a.group_end(), "group_end");
  moved(a.sync(), "sync");
  moved(a.barrier(), "barrier");
  auto sp = a.split(0, 0);
  moved(sp ? Status{} : Status(tl::unexpected(sp.error())), "split");
  CHECK(bad == 0);
  CHECK(b.barrier());
}

TEST_CASE("Environment when MPI is already initialised owns nothing", "[mpi][environment]") {
  {
    mpi::Environment env;
    CHECK(env.ok());
    CHECK_FALSE(env.owns());
    CHECK(env.provided() == mpi::thread_level());
  }
  int fin = 0;
  MPI_Finalized(&fin);
  CHECK(fin == 0);
  Mpi comm = world();
  std::array<std::int32_t, 3> v{1, 2, 3};
  CHECK(comm.all_reduce(std::span(v), polycoll::sum));
  CHECK(v[2] == static_cast<std::int32_t>(3 * comm.world_size()));
  CHECK(mpi::thread_level() == MPI_THREAD_MULTIPLE);
  CHECK_FALSE(comm.serialized());
}

TEST_CASE("borrow uses the caller's comm and restores its error handler; duplicate owns a copy", "[mpi][borrow]") {
  MPI_Errhandler before = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &before);
  {
    auto b = Mpi::borrow(MPI_COMM_WORLD);
    REQUIRE(b);
    CHECK(b->native() == MPI_COMM_WORLD);
    CHECK_FALSE(b->owns_comm());
    MPI_Errhandler during = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &during);
    CHECK(during == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&during);
    std::array<double, 2> v{1.0, 0.5};
    CHECK(b->all_reduce(std::span(v), polycoll::avg));
    CHECK(v[0] == 1.0);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(b->world_size() == static_cast<std::size_t>(size));
  }
  MPI_Errhandler after = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &after);
  CHECK(after == before);
  MPI_Errhandler_free(&after);
  MPI_Errhandler_free(&before);

  auto d = Mpi::duplicate(MPI_COMM_WORLD);
  REQUIRE(d);
  CHECK(d->owns_comm());
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(d->native(), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT);
  // A moved-from communicator reports errors instead of crashing.
  Mpi moved = std::move(*d);
  std::array<float, 1> x{};
  const Status s = d->all_reduce(std::span(x), polycoll::sum);
  CHECK_FALSE(s);
  CHECK(d->native() == MPI_COMM_NULL);
  CHECK(moved.barrier());
}

TEST_CASE("split: all no_color, huge colors and keys, sub-communicators work", "[mpi][split]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  auto none = comm.split(no_color, 0);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  // Colors and keys above INT_MAX are fine: polycoll densifies them for MPI.
  // color = 0xFFFFFFF0 - parity, key = 0xFFFFFFFF - rank: sub-rank counts down.
  auto sub = comm.split(0xFFFFFFF0u - static_cast<std::uint32_t>(r % 2), 0xFFFFFFFFu - static_cast<std::uint32_t>(r));
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  Mpi& s = **sub;
  CHECK(s.owns_comm());
  CHECK(s.world_size() == (w - r % 2 + 1) / 2);
  CHECK(s.rank() == (w - 1 - r) / 2);
  std::array<std::int64_t, 1> v{static_cast<std::int64_t>(r)};
  CHECK(s.all_reduce(std::span(v), polycoll::max));
  CHECK(v[0] == static_cast<std::int64_t>(w - 1 - ((w - 1) % 2 != r % 2 ? 1 : 0)));
  CHECK(comm.barrier());
}

// sync() until it succeeds: with a short op_timeout on an oversubscribed
// machine a peer may be descheduled for longer than the timeout.
Status sync_until_done(Mpi& comm) {
  Status s = comm.sync();
  for (int i = 0; i < 300 && !s && s.error().code == Errc::timeout; ++i) s = comm.sync();
  return s;
}

TEST_CASE("op_timeout: sync and barrier return Errc::timeout listing pending operations", "[mpi][timeout]") {
  Options o;
  o.op_timeout = 100ms;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::array<std::int32_t, 3> in{}, out{7, 8, 9};
  REQUIRE(comm.recv(in, prev, 99));
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = comm.sync();
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::timeout);
  CHECK(contains(s.error().message, "sync() on rank"));
  CHECK(contains(s.error().message, "pending: #1 recv(count=3, dtype=i32, src=" + std::to_string(prev) + ", tag=99)"));
  CHECK(waited >= 100ms);
  CHECK(waited < 5s);
  CHECK(comm.pending() == 1);
  // Nobody sends before every rank has timed out.
  MPI_Barrier(MPI_COMM_WORLD);
  // The recv stays posted: once the message is sent, a later sync completes it.
  REQUIRE(comm.send(out, next, 99));
  CHECK(sync_until_done(comm));
  CHECK(in[2] == 9);
  CHECK(comm.pending() == 0);

  if (w > 1) {
    // Rank 0 enters the barrier alone: it times out; the others join later
    // and rank 0's pending barrier completes at its next sync.
    if (r == 0) {
      const Status b = comm.barrier();
      REQUIRE_FALSE(b);
      CHECK(b.error().code == Errc::timeout);
      CHECK(contains(b.error().message, "barrier()"));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (r != 0) {
      const Status b = comm.barrier();
      CHECK((b || b.error().code == Errc::timeout));
    }
    CHECK(sync_until_done(comm));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("flight record: collective numbers agree across ranks; a timeout logs this rank's ring",
          "[mpi][timeout][flight]") {
  Options o;
  o.op_timeout = 100ms;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::array<float, 2> v{1, 2};
  REQUIRE(comm.all_reduce(std::span<float>(v), polycoll::sum));
  REQUIRE(comm.broadcast(std::span<float>(v), w - 1));
  std::array<std::int32_t, 3> in{}, out{7, 8, 9};
  {
    std::lock_guard lock(g_log_mutex);
    g_log.clear();
  }
  const LogSink previous = set_log_sink(&capture);
  REQUIRE(comm.recv(in, prev, 98));
  const Status s = comm.sync();
  set_log_sink(previous);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::timeout);
  std::vector<std::string> blocks;
  for (const auto& m : g_log) {
    if (m.rfind("flight record (", 0) == 0) blocks.push_back(m);
  }
  REQUIRE(blocks.size() == 1);
  INFO(blocks[0]);
  const std::string me = "rank " + std::to_string(r) + " of " + std::to_string(w) + " [mpi]: last 4 call(s)";
  CHECK(contains(blocks[0], me));
  CHECK(contains(blocks[0], "all_reduce(count=2, dtype=f32, op=sum) [call 1, collective 1]"));
  CHECK(contains(blocks[0], "broadcast(count=2, dtype=f32, root=" + std::to_string(w - 1) + ") [call 2, collective 2]"));
  CHECK(contains(blocks[0], "recv(count=3, dtype=i32, src=" + std::to_string(prev) + ", tag=98) [call 3]"));
  CHECK(contains(blocks[0], "sync() [call 4]  started "));
  CHECK(contains(blocks[0], "failed (timeout)"));
  // Retrying sync() after its timeout logs no second block of the same ring.
  set_log_sink(&capture);
  for (int retry = 0; retry < 2; ++retry) {
    const Status again = comm.sync();
    REQUIRE_FALSE(again);
    CHECK(again.error().code == Errc::timeout);
  }
  set_log_sink(previous);
  std::size_t more = 0;
  for (const auto& m : g_log) more += m.rfind("flight record (", 0) == 0;
  CHECK(more == 1);
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(comm.send(out, next, 98));
  CHECK(sync_until_done(comm));
  REQUIRE(comm.barrier());
  // Every rank numbers the barrier alike: collective 3.
  const auto rec = comm.flight_record();
  REQUIRE_FALSE(rec.empty());
  CHECK(rec.back().call == "barrier()");
  unsigned long long mine = rec.back().collective;
  std::vector<unsigned long long> all(w);
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  for (auto c : all) CHECK(c == 3);
}

TEST_CASE("drop contract: a destructor with pending work waits at most drop_timeout, logs, releases",
          "[mpi][drop]") {
  Options o;
  o.drop_timeout = 200ms;
  const LogSink old = set_log_sink(&capture);
  {
    std::lock_guard lock(g_log_mutex);
    g_log.clear();
  }
  std::array<float, 16> in{};
  std::chrono::steady_clock::duration took{};
  {
    Mpi comm = world(o);
    const std::size_t w = comm.world_size(), r = comm.rank();
    REQUIRE(comm.recv(in, (r + w - 1) % w, 123));  // nobody ever sends it
    CHECK(comm.pending() == 1);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Mpi dying = std::move(comm);
    }
    took = std::chrono::steady_clock::now() - t0;
  }
  set_log_sink(old);
  CHECK(took >= 200ms);
  CHECK(took < 3s);
  std::lock_guard lock(g_log_mutex);
  REQUIRE(g_log.size() == 1);
  INFO(g_log[0]);
  CHECK(contains(g_log[0], "destroyed with 1 pending operation(s)"));
  CHECK(contains(g_log[0], "recv(count=16, dtype=f32"));
  CHECK(contains(g_log[0], "tag=123"));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("thread safety: two threads submit to one communicator, two more to their own", "[mpi][threads]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  constexpr std::uint32_t rounds = 200;
  std::atomic<int> errors{0};
  // sync() is rank-wide: one thread's sync() also waits for the receives the
  // other thread has posted. A thread that syncs between its own rounds can
  // therefore wait for a peer thread that is itself stuck in a sync() waiting
  // for this rank: a cycle through the ranks that forms at odd world sizes.
  // So each thread first posts everything (posting never blocks), then syncs;
  // the two sync() calls run concurrently.
  std::vector<std::array<std::int64_t, 32>> out(2 * rounds), in(2 * rounds);
  auto p2p = [&](std::uint32_t first) {
    for (std::uint32_t t = first; t < first + rounds; ++t) {
      out[t].fill(static_cast<std::int64_t>(1000 * r + t));
      if (!comm.send(out[t], next, t)) ++errors;
    }
    for (std::uint32_t t = first + rounds; t-- > first;) {  // reverse order: matching is by tag
      if (!comm.recv(in[t], prev, t)) ++errors;
    }
    if (!comm.sync()) ++errors;
  };
  {
    std::thread a(p2p, 0u), b(p2p, rounds);
    a.join();
    b.join();
  }
  CHECK(comm.pending() == 0);
  for (std::uint32_t t = 0; t < 2 * rounds; ++t) {
    if (in[t][31] != static_cast<std::int64_t>(1000 * prev + t)) ++errors;
  }
  CHECK(errors.load() == 0);
  // Collectives from two threads, each on its own duplicate (a collective
  // order per communicator is the caller's job, as in MPI).
  auto c1 = Mpi::duplicate(comm.native());
  auto c2 = Mpi::duplicate(comm.native());
  REQUIRE(c1);
  REQUIRE(c2);
  auto reduce = [&](Mpi& c, float base) {
    std::vector<bf16> v(1000);
    for (int i = 0; i < 50; ++i) {
      std::fill(v.begin(), v.end(), bf16(base));
      if (!c.all_reduce(std::span(v), polycoll::sum) || !c.sync()) ++errors;
      if (static_cast<float>(v[999]) != base * static_cast<float>(w)) ++errors;
    }
  };
  {
    std::thread a(reduce, std::ref(*c1), 1.0f), b(reduce, std::ref(*c2), 2.0f);
    a.join();
    b.join();
  }
  CHECK(errors.load() == 0);
  CHECK(comm.barrier());
}

template <class Comm>
std::size_t allocations_per_call(Comm& comm) {
  const std::size_t w = comm.world_size(), r = comm.rank();
  std::vector<float> f(4096, 1.0f);
  std::vector<bf16> h(4096, bf16(1.0f));
  std::vector<bf16> big(256 * 1024, bf16(1.0f));  // a large user-op reduction
  std::vector<std::int32_t> rs(4 * w, 1), rs_out(4);
  std::vector<double> out(64), in(64);
  auto once = [&] {
    bool ok = comm.all_reduce(std::span(f), polycoll::sum).has_value();
    ok &= comm.all_reduce(std::span(h), polycoll::max).has_value();
    ok &= comm.all_reduce(std::span(f), polycoll::avg).has_value();
    ok &= comm.all_reduce(std::span(big), polycoll::max).has_value();
    ok &= comm.reduce_scatter(rs, rs_out, polycoll::sum).has_value();
    ok &= comm.broadcast(std::span(out), 0).has_value();
    ok &= comm.send(out, (r + 1) % w, 5).has_value();
    ok &= comm.recv(in, (r + w - 1) % w, 5).has_value();
    // A small send (copied at post into a recycled block) and a wildcard receive.
    ok &= comm.send(std::span(out).first(4), (r + 1) % w, 6).has_value();
    ok &= comm.recv(std::span(in).first(4), any_source, 6).has_value();
    ok &= comm.sync().has_value();
    return ok;
  };
  for (int i = 0; i < 3; ++i) REQUIRE(once());  // first use creates the cached ops
  const std::size_t before = g_allocations.load();
  for (int i = 0; i < 50; ++i) REQUIRE(once());
  return g_allocations.load() - before;
}

TEST_CASE("no allocation per call on the hot path", "[mpi][alloc]") {
  Mpi comm = world();
  CHECK(allocations_per_call(comm) == 0);
  auto nb = BasicMpi<mpi::Policies<mpi::nonblocking, mpi::builtin_ops>>::world();
  REQUIRE(nb);
  CHECK(allocations_per_call(*nb) == 0);
  CHECK(detail::mpi::cached_op_count() >= 2);
}

TEST_CASE("out of memory for the pending operations: the call fails before it posts, no request is lost",
          "[mpi][alloc]") {
  Mpi comm = world();
  const std::size_t r = comm.rank();
  // Operations to self until the pending operations must grow, with that
  // growth failing: the call that needs it returns an Error and posts
  // nothing (before, a send's MPI request was posted and then lost to
  // std::bad_alloc, and a receive vanished from the pending operations).
  const bool sends = GENERATE(false, true);
  INFO((sends ? "sends" : "receives") << " first");
  // 80 ints: above the 256 bytes a small send copies, so that a send's first
  // allocation is the pending operations' growth.
  constexpr std::size_t n = 80;
  std::vector<std::int32_t> in(1000 * n, -1), out(1000 * n);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int32_t>(i);
  auto post = [&](std::size_t i, bool send) {
    return send ? comm.send(std::span<const std::int32_t>(&out[i * n], n), r, 77)
                : comm.recv(std::span<std::int32_t>(&in[i * n], n), r, 77);
  };
  std::size_t posted = 0;
  Status failed;
  polycoll::test::g_fail_next_allocation = true;
  for (; posted < 1000; ++posted) {
    failed = post(posted, sends);
    if (!failed) break;
  }
  polycoll::test::g_fail_next_allocation = false;
  REQUIRE_FALSE(failed);
  INFO(failed.error().message);
  CHECK(failed.error().code == Errc::backend_failure);
  CHECK(contains(failed.error().message, std::string(sends ? "send" : "recv") + "(count=80, dtype=i32, " +
                                             (sends ? "dest=" : "src=") + std::to_string(r) + ", tag=77)"));
  CHECK(contains(failed.error().message, "out of memory for the pending operations"));
  CHECK(comm.pending() == posted);
  // Every operation that was posted completes, with its other half.
  for (std::size_t i = 0; i < posted; ++i) REQUIRE(post(i, !sends));
  REQUIRE(comm.sync());
  CHECK(std::equal(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(posted * n), out.begin()));
  CHECK(in[posted * n] == -1);
  CHECK(comm.pending() == 0);
}

// Large reductions through polycoll's unit, odd counts, at any world size:
// at 2 ranks on MPICH the blocking policies take the halving exchange
// (backends/mpi/halving.hpp; every dtype under kernel_ops), so the two halves
// differ in length. A receive with tag 0 posted before and matched after
// shows that the collective's traffic never meets the user's (the halving
// runs on its own communicator).
TEST_CASE("large user-op all_reduce at any world size", "[mpi][large][halving]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    const std::size_t n = 256 * 1024 + 1;  // elements: 256 KiB and more for every dtype
    std::array<std::int32_t, 2> got{}, token{static_cast<std::int32_t>(r), 7};
    REQUIRE(comm->recv(std::span(got), (r + w - 1) % w, 0));
    std::vector<bf16> h(n);
    std::vector<f16> a(n, f16(static_cast<float>(r)));
    std::vector<f8e4m3> m(n);
    std::vector<std::int8_t> i8(n);
    std::vector<std::uint16_t> u16(n);
    std::vector<float> f(n);
    std::vector<double> d(n, static_cast<double>(r));
    std::vector<std::complex<float>> z(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = static_cast<float>(i % 11 + 3 * r);
      z[i] = {static_cast<float>(r), static_cast<float>(i % 4)};
      h[i] = bf16(static_cast<float>(i % 7 + r));
      m[i] = f8e4m3(static_cast<float>(i % 5 + r));
      i8[i] = static_cast<std::int8_t>(static_cast<std::uint8_t>(i % 100 + 50 * r));
      u16[i] = static_cast<std::uint16_t>(65000u + i % 3 + r);
    }
    REQUIRE(comm->all_reduce(std::span(h), polycoll::sum));
    REQUIRE(comm->all_reduce(std::span(a), polycoll::avg));
    REQUIRE(comm->all_reduce(std::span(m), polycoll::max));
    REQUIRE(comm->all_reduce(std::span(i8), polycoll::sum));
    REQUIRE(comm->all_reduce(std::span(u16), polycoll::sum));
    REQUIRE(comm->all_reduce(std::span(f), polycoll::sum));
    REQUIRE(comm->all_reduce(std::span(d), polycoll::avg));
    REQUIRE(comm->all_reduce(std::span(z), polycoll::sum));
    REQUIRE(comm->send(std::span<const std::int32_t>(token), (r + 1) % w, 0));
    REQUIRE(comm->sync());
    CHECK(got[0] == static_cast<std::int32_t>((r + w - 1) % w));
    CHECK(got[1] == 7);
    std::size_t bad = 0;
    const std::size_t tri = w * (w - 1) / 2;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint8_t want_i8 = 0;
      for (std::size_t q = 0; q < w; ++q) want_i8 = static_cast<std::uint8_t>(want_i8 + i % 100 + 50 * q);
      bad += static_cast<float>(h[i]) != static_cast<float>(w * (i % 7) + tri);
      bad += static_cast<float>(a[i]) != static_cast<float>(w - 1) / 2.0f;
      bad += static_cast<float>(m[i]) != static_cast<float>(i % 5 + w - 1);
      bad += static_cast<std::uint8_t>(i8[i]) != want_i8;
      bad += u16[i] != static_cast<std::uint16_t>(w * (65000u + i % 3) + tri);
      bad += f[i] != static_cast<float>(w * (i % 11) + 3 * tri);
      bad += d[i] != static_cast<double>(w - 1) / 2.0;
      bad += z[i] != std::complex<float>(static_cast<float>(tri), static_cast<float>(w * (i % 4)));
    }
    CHECK(bad == 0);
  };
  run(Mpi::world());
  using namespace polycoll::mpi;
  run(BasicMpi<Policies<blocking, builtin_ops>>::world());
  run(BasicMpi<Policies<blocking, kernel_ops>>::world());     // every dtype through the halving
  run(BasicMpi<Policies<nonblocking, kernel_ops>>::world());  // MPI_Iallreduce: the same results
}

// At 2 ranks the blocking policies reduce small messages through polycoll's
// unit with the 2-rank exchange (backends/mpi/halving.hpp): both ranks reduce
// the same two operands in the same order, so they agree bit for bit even
// where the order shows (which NaN's payload a sum or a min keeps). Sizes up
// to and past the exchange's limit; values checked too.
TEST_CASE("small all_reduce: every rank gets the same bits", "[mpi][exchange]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    const auto nan32 = std::bit_cast<float>(static_cast<std::uint32_t>(0x7fc00000u + r + 1));
    const auto nan64 = std::bit_cast<double>(static_cast<std::uint64_t>(0x7ff8000000000000ull + r + 1));
    const auto nan16 = std::bit_cast<bf16>(static_cast<std::uint16_t>(0x7fc0u + r + 1));
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{255}, std::size_t{256},
                                std::size_t{257}, std::size_t{1023}, std::size_t{1024}, std::size_t{2048},
                                std::size_t{2049}}) {
      std::vector<float> s(n), mn(n), mx(n);
      std::vector<double> a(n);
      std::vector<bf16> h(n);
      for (std::size_t i = 0; i < n; ++i) {
        const auto v = static_cast<float>(i % 5 + r);
        const bool nan_here = i % 3 == 0, nan_on_0 = i % 3 == 1 && r == 0;
        s[i] = nan_here ? nan32 : v;
        mn[i] = nan_here || nan_on_0 ? nan32 : v;
        mx[i] = nan_here || nan_on_0 ? nan32 : v;
        a[i] = nan_here ? nan64 : static_cast<double>(v);
        h[i] = nan_here ? nan16 : bf16(v);
      }
      REQUIRE(comm->all_reduce(std::span(s), polycoll::sum));
      REQUIRE(comm->all_reduce(std::span(mn), polycoll::min));
      REQUIRE(comm->all_reduce(std::span(mx), polycoll::max));
      REQUIRE(comm->all_reduce(std::span(a), polycoll::avg));
      REQUIRE(comm->all_reduce(std::span(h), polycoll::sum));
      REQUIRE(comm->sync());
      std::size_t bad = 0;
      const auto tri = static_cast<float>(w * (w - 1) / 2);
      for (std::size_t i = 0; i < n; ++i) {
        const auto base = static_cast<float>(i % 5);
        if (i % 3 == 0) {
          bad += !std::isnan(s[i]) + !std::isnan(mn[i]) + !std::isnan(mx[i]) + !std::isnan(a[i]) +
                 !std::isnan(static_cast<float>(h[i]));
        } else {
          bad += s[i] != static_cast<float>(w) * base + tri;
          bad += a[i] != static_cast<double>(base) + static_cast<double>(w - 1) / 2.0;
          bad += static_cast<float>(h[i]) != static_cast<float>(w) * base + tri;
          if (i % 3 == 2) bad += mn[i] != base || mx[i] != base + static_cast<float>(w - 1);
        }
      }
      CHECK(bad == 0);
      // Bit-identical on every rank where polycoll's exchange reduced.
      auto same_everywhere = [&](const auto& v) {
        const std::size_t bytes = v.size() * sizeof(v[0]);
        std::vector<std::byte> all(bytes * w);
        REQUIRE(MPI_Allgather(v.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                              MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
        const bool window = comm->shared_window_bytes() > 0 && bytes <= detail::mpi::shm_to_bytes;
        if (w != 2 || (bytes > detail::mpi::exchange_to_bytes && !window)) return;
        INFO("n " << n << ", " << sizeof(v[0]) << "-byte elements");
        CHECK(std::memcmp(all.data(), all.data() + bytes, bytes) == 0);
      };
      same_everywhere(s);
      same_everywhere(mn);
      same_everywhere(mx);
      same_everywhere(a);
      same_everywhere(h);
    }
  };
  run(Mpi::world());
  run(BasicMpi<mpi::Policies<mpi::blocking, mpi::kernel_ops>>::world());
}

// True when every rank of MPI_COMM_WORLD runs on one node (shared memory).
bool one_node() {
  MPI_Comm node = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS);
  int n = 0, w = 0;
  MPI_Comm_size(node, &n);
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  MPI_Comm_free(&node);
  return n == w;
}

// At 2 ranks on one node the blocking policies reduce through a shared-memory
// window up to 4 MiB (backends/mpi/shm.hpp): in the sequence number's cache
// line up to 56 bytes, one phase up to 16 KiB, halves above, the window grown
// as larger messages come, point-to-point beyond the cap. Sizes on both sides
// of every boundary, in an order that grows the window twice and goes back
// down; calls that cycle through the three algorithms with new values each
// time (each call's buffer set is reused two calls later: a rank overwriting
// it early would show here); bit identity across ranks; and at any other
// world size the same values.
TEST_CASE("2-rank shared-memory all_reduce: every size, growth, alternation, same bits", "[mpi][shm]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    const std::size_t tri = w * (w - 1) / 2;
    const bool window_expected = w == 2 && one_node();
    auto same_everywhere = [&](const auto& v) {
      const std::size_t bytes = v.size() * sizeof(v[0]);
      std::vector<std::byte> all(bytes * w);
      REQUIRE(MPI_Allgather(v.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                            MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
      if (w == 2) CHECK(std::memcmp(all.data(), all.data() + bytes, bytes) == 0);
    };
    const std::size_t cap = detail::mpi::shm_to_bytes, one = detail::mpi::shm_one_phase_to_bytes;
    const std::size_t tiny = detail::mpi::shm_inline_bytes / 4;
    for (const std::size_t f32s : {std::size_t{1}, std::size_t{2}, std::size_t{3}, tiny, tiny + 1, one / 4 - 1,
                                   one / 4, one / 4 + 1,
                                   std::size_t{20000}, std::size_t{65537}, cap / 4, std::size_t{777},
                                   cap / 4 + 1, std::size_t{40001}}) {
      INFO("f32 elements " << f32s);
      std::vector<float> f(f32s);
      std::vector<bf16> h(2 * f32s);  // the same bytes
      std::vector<std::int64_t> big(f32s / 2 + 1);
      std::vector<std::complex<float>> z(f32s / 2 + 1);
      std::vector<double> a(f32s / 2 + 1, static_cast<double>(r));
      std::vector<std::uint8_t> u8(4 * f32s);
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i % 13 + 5 * r);
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = bf16(static_cast<float>(i % 9 + r));
      for (std::size_t i = 0; i < big.size(); ++i) {
        big[i] = static_cast<std::int64_t>(i * 1000003 % 77) - static_cast<std::int64_t>(r * 40);
      }
      for (std::size_t i = 0; i < z.size(); ++i) z[i] = {static_cast<float>(r), static_cast<float>(i % 4)};
      for (std::size_t i = 0; i < u8.size(); ++i) u8[i] = static_cast<std::uint8_t>((i + 31 * r) % 251);
      REQUIRE(comm->all_reduce(std::span(f), polycoll::sum));
      if (window_expected && f32s * 4 <= cap) CHECK(comm->shared_window_bytes() >= 2 * f32s * 4);
      REQUIRE(comm->all_reduce(std::span(h), polycoll::sum));
      REQUIRE(comm->all_reduce(std::span(big), polycoll::max));
      REQUIRE(comm->all_reduce(std::span(z), polycoll::sum));
      REQUIRE(comm->all_reduce(std::span(a), polycoll::avg));
      REQUIRE(comm->all_reduce(std::span(u8), polycoll::min));
      REQUIRE(comm->sync());
      std::array<std::size_t, 6> bad{};  // f32, bf16, i64, c64, f64, u8
      for (std::size_t i = 0; i < f.size(); ++i) bad[0] += f[i] != static_cast<float>(w * (i % 13) + 5 * tri);
      for (std::size_t i = 0; i < h.size(); ++i) {
        bad[1] += static_cast<float>(h[i]) != static_cast<float>(w * (i % 9) + tri);
      }
      for (std::size_t i = 0; i < big.size(); ++i) bad[2] += big[i] != static_cast<std::int64_t>(i * 1000003 % 77);
      for (std::size_t i = 0; i < z.size(); ++i) {
        bad[3] += z[i] != std::complex<float>(static_cast<float>(tri), static_cast<float>(w * (i % 4)));
      }
      for (std::size_t i = 0; i < a.size(); ++i) bad[4] += a[i] != static_cast<double>(w - 1) / 2.0;
      for (std::size_t i = 0; i < u8.size(); ++i) {
        std::uint8_t want = 255;
        for (std::size_t q = 0; q < w; ++q) want = std::min(want, static_cast<std::uint8_t>((i + 31 * q) % 251));
        bad[5] += u8[i] != want;
      }
      CHECK(bad == std::array<std::size_t, 6>{});
      same_everywhere(f);
      same_everywhere(h);
      same_everywhere(a);
    }
    if (window_expected) CHECK(comm->shared_window_bytes() >= cap);
    // In-line, one phase and halves in turn, new values every call.
    std::size_t bad = 0;
    for (std::size_t it = 0; it < 300; ++it) {
      std::vector<float> v(it % 3 == 0 ? 10 : it % 3 == 1 ? 1000 : 20000);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((it * 7 + i) % 1000 + r);
      REQUIRE(comm->all_reduce(std::span(v), polycoll::sum));
      for (std::size_t i = 0; i < v.size(); ++i) bad += v[i] != static_cast<float>(w * ((it * 7 + i) % 1000) + tri);
    }
    REQUIRE(comm->sync());
    CHECK(bad == 0);
  };
  run(Mpi::world());
  using namespace polycoll::mpi;
  run(BasicMpi<Policies<blocking, kernel_ops>>::world());
  // builtin_ops keeps MPI's own allreduce for native dtypes, but f16/bf16/fp8
  // and 8/16-bit sums still take the window.
  auto b = BasicMpi<Policies<blocking, builtin_ops>>::world();
  REQUIRE(b);
  std::vector<float> f(1000, 1.0f);
  REQUIRE(b->all_reduce(std::span(f), polycoll::sum));
  CHECK(b->shared_window_bytes() == 0);
  std::vector<bf16> h(1000, bf16(1.0f));
  REQUIRE(b->all_reduce(std::span(h), polycoll::sum));
  CHECK((b->shared_window_bytes() > 0) == (b->world_size() >= 2 && one_node()));
  CHECK(static_cast<float>(h[999]) == static_cast<float>(b->world_size()));
}

// With every rank on one node, all_reduce goes through a shared-memory
// window at any world size from 2 (backends/mpi/shm.hpp at 2,
// backends/mpi/node_shm.hpp from 3): in the line, one phase, and above it
// halves (2 ranks) or reduce-scatter + all-gather (3+). Each path folds in
// rank order, so every rank gets the bits of the rank-order fold
// (tests/reproducible.hpp's inputs: another order shows), for the narrow
// formats, avg and min/max too, in place and out of place, with counts that
// p does not divide; calls alternate between the paths with new inputs
// (each buffer set is reused two calls later).
TEST_CASE("node shared-memory all_reduce: rank-order bits at every size and world size", "[mpi][shm][node]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    const bool window = w >= 2 && one_node();
    const std::size_t cap = w >= 3 ? detail::mpi::node_shm_to_bytes(w) : detail::mpi::shm_to_bytes;
    std::string bad;
    // Every rank makes every call whatever it found (a rank that stopped
    // calling would leave the others waiting): only the first difference is kept.
    auto one = [&]<class T, ReduceOp Op>(std::size_t n, std::size_t salt, bool in_place) {
      const std::vector<T> x = test::reproducible::inputs<T>(r, n, salt);
      std::vector<T> got(n);
      if (in_place) {
        got = x;
        REQUIRE(comm->all_reduce(std::span(got), op_tag<Op>{}));
      } else {
        REQUIRE(comm->all_reduce(std::span<const T>(x), std::span(got), op_tag<Op>{}));
      }
      // Where MPI's own allreduce runs (above the window, or across nodes)
      // its order is MPI's: only the window promises these bits.
      if (!window || n * sizeof(T) > cap || !bad.empty()) return;
      bad = test::reproducible::compare<T>(std::string(in_place ? "in place" : "out of place") + " " +
                                               std::string(name(Op)),
                                           std::span<const T>(got), test::reproducible::fold<T, Op>(w, n, salt), 0,
                                           r, w);
    };
    std::size_t salt = 0;
    for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{13}, std::size_t{1000},
                                std::size_t{4097}, std::size_t{30001}, std::size_t{65537}, std::size_t{3}}) {
      INFO("n " << n);
      for (const bool in_place : {true, false}) {
        one.template operator()<float, ReduceOp::Sum>(n, ++salt, in_place);
        one.template operator()<bf16, ReduceOp::Sum>(n, ++salt, in_place);
        one.template operator()<f16, ReduceOp::Avg>(n, ++salt, in_place);
        one.template operator()<double, ReduceOp::Prod>(n, ++salt, in_place);
        one.template operator()<float, ReduceOp::Min>(n, ++salt, in_place);
        one.template operator()<std::complex<float>, ReduceOp::Avg>(n, ++salt, in_place);
        one.template operator()<std::int32_t, ReduceOp::Max>(n, ++salt, in_place);
      }
      if (window && w >= 3) CHECK(comm->shared_window_bytes() > 0);
    }
    // The three paths in turn, new inputs every call.
    for (std::size_t it = 0; it < 60; ++it) {
      one.template operator()<float, ReduceOp::Sum>(it % 3 == 0 ? 7 : it % 3 == 1 ? 900 : 20000, ++salt, true);
    }
    REQUIRE(comm->sync());
    CHECK(bad == "");
  };
  run(Mpi::world());
  using namespace polycoll::mpi;
  run(BasicMpi<Policies<blocking, kernel_ops>>::world());
}

// At 2 or more ranks on one node, broadcast, all_gather, reduce_scatter and
// reduce go through the node window (backends/mpi/node_shm.hpp) up to
// node_shm_to_bytes(p) in each rank's buffer set: every root, in place and
// out of place, sizes on both sides of the limit, reduce_scatter's blocks
// with the rank-order fold's bits. A communicator that makes only these
// calls has a window afterwards. Above the limit, and at 1 rank, MPI
// serves them: the same values (reductions in MPI's order are compared only
// where exact).
TEST_CASE("node window: broadcast, all_gather, reduce_scatter and reduce at every size and root", "[mpi][shm][node]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    const bool node = w >= 2 && one_node();
    const std::size_t cap = detail::mpi::node_shm_to_bytes(w);
    namespace rp = test::reproducible;
    std::string bad;
    auto keep = [&](std::string d) {
      if (bad.empty()) bad = std::move(d);
    };
    std::size_t salt = 0;
    for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{4097}, cap / 4,
                                cap / 4 + 1, std::size_t{3}}) {
      INFO("n " << n);
      ++salt;
      for (std::size_t root = 0; root < w; ++root) {
        std::vector<float> b = rp::inputs<float>(r, n, salt + root);
        REQUIRE(comm->broadcast(std::span(b), root));
        if (w >= 2) CHECK(comm->last_algorithm() == (node && n * 4 <= cap ? "node window" : "mpi"));
        keep(rp::compare<float>("broadcast", std::span<const float>(b), rp::inputs<float>(root, n, salt + root), 0,
                                r, w));
      }
      for (const bool in_place : {false, true}) {
        const std::vector<std::int16_t> mine = rp::inputs<std::int16_t>(r, n, salt);
        std::vector<std::int16_t> all(n * w);
        if (in_place) {
          std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * n));
          REQUIRE(comm->all_gather(std::span<const std::int16_t>(all.data() + r * n, n), std::span(all)));
        } else {
          REQUIRE(comm->all_gather(std::span<const std::int16_t>(mine), std::span(all)));
        }
        if (w >= 2) CHECK(comm->last_algorithm() == (node && n * 2 <= cap ? "node window" : "mpi"));
        for (std::size_t q = 0; q < w; ++q) {
          keep(rp::compare<std::int16_t>("all_gather", std::span<const std::int16_t>(all.data() + q * n, n),
                                         rp::inputs<std::int16_t>(q, n, salt), 0, r, w));
        }
      }
    }
    // reduce_scatter of n elements per rank: bf16 sum (polycoll's unit on
    // every path), f64 avg and i32 max, out of place and in place, at n on
    // both sides of the window's limit for the whole send (w * n elements).
    auto scatter = [&]<class T, ReduceOp Op>(std::size_t n, bool in_place) {
      ++salt;
      const std::vector<T> send = rp::inputs<T>(r, n * w, salt);
      const std::vector<T> want = rp::fold<T, Op>(w, n * w, salt);
      std::vector<T> got(n);
      if (in_place) {
        std::vector<T> buf = send;
        REQUIRE(comm->reduce_scatter(std::span<const T>(buf), std::span(buf.data() + r * n, n), op_tag<Op>{}));
        std::copy(buf.begin() + static_cast<std::ptrdiff_t>(r * n),
                  buf.begin() + static_cast<std::ptrdiff_t>((r + 1) * n), got.begin());
      } else {
        REQUIRE(comm->reduce_scatter(std::span<const T>(send), std::span(got), op_tag<Op>{}));
      }
      // (bf16 sum: a pair polycoll's algorithms serve under every policy.)
      if (std::is_same_v<T, bf16> && w >= 2) {
        CHECK(comm->last_algorithm() == (node && n * w * sizeof(T) <= cap ? "node window" : "mpi"));
      }
      const bool exact = Op == ReduceOp::Max || (node && n * w * sizeof(T) <= cap);
      if (exact) {
        keep(rp::compare<T>(std::string("reduce_scatter ") + (in_place ? "in place " : "") + std::string(name(Op)),
                            std::span<const T>(got), want, r * n, r, w));
      }
    };
    for (const bool in_place : {false, true}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, cap / (w * 8), cap / (w * 8) + 1}) {
        INFO("reduce_scatter n " << n);
        scatter.template operator()<bf16, ReduceOp::Sum>(n, in_place);
        scatter.template operator()<double, ReduceOp::Avg>(n, in_place);
        scatter.template operator()<std::int32_t, ReduceOp::Max>(n, in_place);
      }
    }
    // reduce to every root: the same pairs, in place and out of place at
    // the root, at n on both sides of the one-phase fold (16 KiB) and of the
    // window's limit; a rank other than the root keeps its recv untouched.
    auto reduce = [&]<class T, ReduceOp Op>(std::size_t n, std::size_t root, bool in_place) {
      ++salt;
      const std::vector<T> send = rp::inputs<T>(r, n, salt);
      std::vector<T> got = r == root && in_place ? send : std::vector<T>(n, T(7.0f));
      if (r == root && in_place) {
        REQUIRE(comm->reduce(std::span<const T>(got), std::span(got), op_tag<Op>{}, root));
      } else if (r != root && salt % 2 == 0) {
        // Off the root recv is unused: an empty span, as the API allows.
        REQUIRE(comm->reduce(std::span<const T>(send), std::span<T>(), op_tag<Op>{}, root));
      } else {
        REQUIRE(comm->reduce(std::span<const T>(send), std::span(got), op_tag<Op>{}, root));
      }
      if (std::is_same_v<T, bf16> && w >= 2) {
        CHECK(comm->last_algorithm() == (node && n * sizeof(T) <= cap ? "node window" : "mpi"));
      }
      if (r != root) {
        keep(rp::compare<T>("reduce: recv off the root", std::span<const T>(got), std::vector<T>(n, T(7.0f)), 0, r, w));
        return;
      }
      const std::vector<T> want = rp::fold<T, Op>(w, n, salt);
      const bool exact = Op == ReduceOp::Max || (node && n * sizeof(T) <= cap);
      if (exact) {
        keep(rp::compare<T>(std::string("reduce ") + (in_place ? "in place " : "") + std::string(name(Op)),
                            std::span<const T>(got), want, 0, r, w));
      } else if constexpr (std::is_same_v<T, double>) {
        // MPI's order (above the window's limit): the same sum to rounding.
        for (std::size_t i = 0; i < n; ++i) {
          if (std::abs(got[i] - want[i]) > 1e-12 * (1 + std::abs(want[i]))) {
            keep("reduce f64 avg n=" + std::to_string(n) + ": element " + std::to_string(i) + " is " +
                 std::to_string(got[i]) + ", want about " + std::to_string(want[i]));
            break;
          }
        }
      }
    };
    for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{2049}, cap / 8, cap / 8 + 1}) {
      INFO("reduce n " << n);
      for (std::size_t root = 0; root < w; ++root) {
        const bool in_place = (root + n) % 2 == 0;
        reduce.template operator()<bf16, ReduceOp::Sum>(n, root, in_place);
        reduce.template operator()<double, ReduceOp::Avg>(n, root, !in_place);
        reduce.template operator()<std::int32_t, ReduceOp::Max>(n, root, in_place);
      }
    }
    CHECK((comm->shared_window_bytes() > 0) == node);
    REQUIRE(comm->sync());
    CHECK(bad == "");
  };
  run(Mpi::world());
  using namespace polycoll::mpi;
  run(BasicMpi<Policies<blocking, kernel_ops>>::world());
  Options checked;
  checked.check_consistency = true;
  run(Mpi::world(checked));
}

// POLYCOLL_MPI_SHM=0 keeps a communicator's all_reduce off the windows; the
// ranks agree on it when the first window would be made, so one rank's 0
// is everyone's (a rank alone in MPI_Allreduce while the others map a window
// would hang). A communicator made after it is unset gets the window again.
TEST_CASE("POLYCOLL_MPI_SHM=0 on one rank keeps every rank off the windows", "[mpi][shm][node]") {
  int r = 0, w = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  if (r == 0) ::setenv("POLYCOLL_MPI_SHM", "0", 1);
  Mpi off = world();
  std::vector<float> v(1000, static_cast<float>(r + 1));
  std::vector<std::int32_t> m(10, r);
  REQUIRE(off.all_reduce(std::span(v), polycoll::sum));
  REQUIRE(off.all_reduce(std::span(m), polycoll::max));
  if (r == 0) ::unsetenv("POLYCOLL_MPI_SHM");
  CHECK(off.shared_window_bytes() == 0);
  CHECK(v[999] == static_cast<float>(w * (w + 1) / 2));
  CHECK(m[9] == w - 1);
  Mpi on = world();
  REQUIRE(on.all_reduce(std::span(v), polycoll::sum));
  CHECK((on.shared_window_bytes() > 0) == (w >= 2 && one_node()));
  CHECK(v[0] == static_cast<float>(w * w * (w + 1) / 2));
}

// An invalid value of the environment variable `var`, on every rank and then
// on rank 0 only: the first all_reduce that would agree on it fails on every
// rank, naming it and the rank that has it (no rank waits for another);
// the next all_reduce gives the right sum, and `after` checks what served it.
template <class After>
void invalid_value_fails_everywhere(const char* var, const char* value, After&& after) {
  int ri = 0, wi = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ri);
  MPI_Comm_size(MPI_COMM_WORLD, &wi);
  for (const bool everywhere : {true, false}) {
    if (everywhere || ri == 0) ::setenv(var, value, 1);
    Mpi bad = world();
    ::unsetenv(var);
    if (wi < 2) continue;  // (one rank: polycoll's algorithms never run, nothing to agree on)
    INFO(var << "=" << value << (everywhere ? " on every rank" : " on rank 0"));
    std::vector<float> x(10, 1.0f);
    auto st = bad.all_reduce(std::span(x), polycoll::sum);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::invalid_argument);
    const std::string named = everywhere || ri == 0 ? std::string(var) + "=\"" + value + "\""
                                                    : std::string(var) + " on another rank";
    CHECK_THAT(st.error().message, Catch::Matchers::Contains(named));
    REQUIRE(bad.all_reduce(std::span(x), polycoll::sum));
    CHECK(x[9] == static_cast<float>(wi));
    after(bad);
  }
}

// POLYCOLL_MPI_ALL_REDUCE forces the algorithm where it can serve the call
// (docs/mpi.md, "Which algorithm serves a call"); last_all_reduce_algorithm()
// says which one did. Results are checked against the exact sums every time,
// bf16 sums (always polycoll's unit) and i32 max (MPI's predefined op unless
// polycoll's algorithms take it) included. The ranks agree: one rank's value
// alone is ignored. An unknown value fails the factory, naming the variable.
TEST_CASE("POLYCOLL_MPI_ALL_REDUCE forces the all_reduce algorithm", "[mpi][algorithms]") {
  int ri = 0, wi = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ri);
  MPI_Comm_size(MPI_COMM_WORLD, &wi);
  const std::size_t r = static_cast<std::size_t>(ri), w = static_cast<std::size_t>(wi);
  const bool node = one_node();
  // The algorithm a forced value gives for `bytes` (not 0) at this world size.
  auto expected = [&](const std::string& forced, std::size_t bytes) -> std::string {
    if (w == 1) return "mpi";
    if (forced == "mpi") return "mpi";
    const bool pair_window = w == 2 && node && bytes <= detail::mpi::shm_to_bytes;
    const bool node_window = w >= 3 && node && bytes <= detail::mpi::node_shm_to_bytes(w);
    if (w == 2 && forced == "exchange" && bytes <= detail::mpi::exchange_to_bytes) return "exchange";
    if (w == 2 && forced == "halving") return "halving";
    if (pair_window) return "window";
    if (node_window) return "node window";
    if (w == 2 && bytes <= detail::mpi::exchange_to_bytes) return "exchange";
    if (w == 2 && detail::mpi::halving_mpi && bytes >= detail::mpi::halving_from_bytes) return "halving";
    return "mpi";
  };
  for (const std::string forced : {"mpi", "window", "exchange", "halving", "auto"}) {
    ::setenv("POLYCOLL_MPI_ALL_REDUCE", forced.c_str(), 1);
    Mpi comm = world();
    ::unsetenv("POLYCOLL_MPI_ALL_REDUCE");
    CHECK(comm.last_all_reduce_algorithm() == "none");
    for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{5000}, std::size_t{300000}}) {
      // (At 3 or more ranks the exchange and the halving cannot serve: their
      // fallback is the usual choice, which "auto" covers at every size.)
      if (w >= 3 && (forced == "exchange" || forced == "halving") && n > 100) continue;
      INFO(forced << ", " << n << " f32 at " << w << " ranks");
      std::vector<float> f(n, static_cast<float>(r + 1));
      REQUIRE(comm.all_reduce(std::span(f), polycoll::sum));
      CHECK(comm.last_all_reduce_algorithm() == expected(forced, n * 4));
      CHECK(f[0] == static_cast<float>(w * (w + 1) / 2));
      CHECK(f[n - 1] == static_cast<float>(w * (w + 1) / 2));
      std::vector<bf16> h(n, bf16(static_cast<float>(r + 1)));
      REQUIRE(comm.all_reduce(std::span(h), polycoll::sum));
      CHECK(comm.last_all_reduce_algorithm() == expected(forced, n * 2));
      CHECK(static_cast<float>(h[n - 1]) == static_cast<float>(w * (w + 1) / 2));
      std::vector<std::int32_t> m(n, static_cast<std::int32_t>(r));
      m[n / 2] = static_cast<std::int32_t>(100 + r);
      REQUIRE(comm.all_reduce(std::span(m), polycoll::max));
      CHECK(m[n - 1] == static_cast<std::int32_t>(n == 1 ? 100 + w - 1 : w - 1));
      CHECK(m[n / 2] == static_cast<std::int32_t>(100 + w - 1));
    }
  }
  // One rank's value alone: the ranks agree on none, the usual choice.
  if (r == 0) ::setenv("POLYCOLL_MPI_ALL_REDUCE", "mpi", 1);
  Mpi mixed = world();
  if (r == 0) ::unsetenv("POLYCOLL_MPI_ALL_REDUCE");
  std::vector<float> v(100, 1.0f);
  REQUIRE(mixed.all_reduce(std::span(v), polycoll::sum));
  CHECK(mixed.last_all_reduce_algorithm() == expected("auto", 400));
  CHECK(v[99] == static_cast<float>(w));
  // An unknown value: the next calls run the usual choice.
  invalid_value_fails_everywhere("POLYCOLL_MPI_ALL_REDUCE", "fastest", [&](const Mpi& bad) {
    CHECK(bad.last_all_reduce_algorithm() == expected("auto", 40));
  });
}

// POLYCOLL_MPI_NODE_SIZE=k takes ranks k*i .. k*i+k-1 for one node (a test
// aid: docs/mpi.md, "Across nodes"), so the hierarchical all_reduce runs on
// this one machine: a reduce-scatter in each node's window, MPI_Allreduce of
// each slice among the ranks of its index on every node, an all-gather in
// the window. It serves where the nodes are two or more and all of one size;
// elsewhere the usual choice does. Checked against exact sums and maxima at
// sizes that leave slices empty (n < k), uneven, and above the window's
// limit (chunked), in place and out of place, and for the same bits on every
// rank; not for Options::reproducible (not rank order); with the check on;
// an invalid value fails the first all_reduce on every rank, naming it.
TEST_CASE("POLYCOLL_MPI_NODE_SIZE: the hierarchical all_reduce", "[mpi][algorithms][hierarchical]") {
  int ri = 0, wi = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ri);
  MPI_Comm_size(MPI_COMM_WORLD, &wi);
  const std::size_t r = static_cast<std::size_t>(ri), w = static_cast<std::size_t>(wi);
  for (const std::size_t k : {std::size_t{1}, std::size_t{2}}) {
    const bool serves = w % k == 0 && w / k >= 2;
    for (const bool checked : {false, true}) {
      ::setenv("POLYCOLL_MPI_NODE_SIZE", std::to_string(k).c_str(), 1);
      Options o;
      o.check_consistency = checked;
      Mpi comm = world(o);
      ::unsetenv("POLYCOLL_MPI_NODE_SIZE");
      const std::size_t above = detail::mpi::node_shm_to_bytes(k) / 4 + 1000;  // f32: two chunks at k = 1, 2
      for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, above}) {
        INFO("nodes of " << k << " at " << w << " ranks, n=" << n << (checked ? ", checked" : ""));
        // f32 sums of small integers: exact in any order.
        std::vector<float> f(n);
        for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>((r + 1) * (i % 7 + 1));
        REQUIRE(comm.all_reduce(std::span(f), polycoll::sum));
        CHECK((comm.last_all_reduce_algorithm() == "hierarchical") == serves);
        const std::size_t tri = w * (w + 1) / 2;
        std::size_t bad = n;
        for (std::size_t i = 0; i < n && bad == n; ++i) {
          if (f[i] != static_cast<float>(tri * (i % 7 + 1))) bad = i;
        }
        CHECK(bad == n);
        // Out of place, bf16 (polycoll's unit on every path), i32 max, f64 avg.
        std::vector<bf16> hs(n, bf16(static_cast<float>(r + 1))), hr(n, bf16(-1.0f));
        REQUIRE(comm.all_reduce(std::span<const bf16>(hs), std::span(hr), polycoll::sum));
        CHECK(static_cast<float>(hr[0]) == static_cast<float>(tri));
        CHECK(static_cast<float>(hr[n - 1]) == static_cast<float>(tri));
        CHECK(static_cast<float>(hs[n - 1]) == static_cast<float>(r + 1));
        std::vector<std::int32_t> m(n, static_cast<std::int32_t>(r));
        m[n / 2] = static_cast<std::int32_t>(100 + r);
        REQUIRE(comm.all_reduce(std::span(m), polycoll::max));
        CHECK(m[n / 2] == static_cast<std::int32_t>(100 + w - 1));
        CHECK(m[n - 1] == static_cast<std::int32_t>(n == 1 ? 100 + w - 1 : w - 1));
        std::vector<double> a(n, static_cast<double>(r + 1));
        REQUIRE(comm.all_reduce(std::span(a), polycoll::avg));
        CHECK(a[n - 1] == static_cast<double>(w + 1) / 2);
        if (serves) CHECK(comm.last_all_reduce_algorithm() == "hierarchical");
        // Sums whose bits depend on the order: every rank gets the same bits.
        std::vector<float> g(n);
        for (std::size_t i = 0; i < n; ++i) {
          g[i] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i % 13);
        }
        REQUIRE(comm.all_reduce(std::span(g), polycoll::sum));
        std::vector<std::uint32_t> mine(n), theirs(n);
        std::memcpy(mine.data(), g.data(), n * 4);
        theirs = mine;
        REQUIRE(comm.broadcast(std::span(theirs), 0));
        CHECK(mine == theirs);
      }
      // Reproducible: the rank-order paths, never the hierarchical one.
      Options ro = o;
      ro.reproducible = true;
      ::setenv("POLYCOLL_MPI_NODE_SIZE", std::to_string(k).c_str(), 1);
      Mpi repro = world(ro);
      ::unsetenv("POLYCOLL_MPI_NODE_SIZE");
      std::vector<float> v(100, 0.1f * static_cast<float>(r + 1));
      REQUIRE(repro.all_reduce(std::span(v), polycoll::sum));
      // (At 2 ranks one binary step per element: every path is rank order.)
      if (w >= 3) CHECK(repro.last_all_reduce_algorithm() != "hierarchical");
      float chain = 0.1f;
      for (std::size_t j = 1; j < w; ++j) chain += 0.1f * static_cast<float>(j + 1);
      CHECK(v[99] == chain);
    }
  }
  // With the check on, a call that differs is caught before the path runs.
  {
    ::setenv("POLYCOLL_MPI_NODE_SIZE", "1", 1);
    Options o;
    o.check_consistency = true;
    Mpi comm = world(o);
    ::unsetenv("POLYCOLL_MPI_NODE_SIZE");
    std::vector<float> v(11, 1.0f);
    REQUIRE(comm.all_reduce(std::span(v.data(), 10), polycoll::sum));  // the path decided
    if (w >= 2) {
      auto st = comm.all_reduce(std::span(v.data(), r == 0 ? 10 : 11), polycoll::sum);
      REQUIRE_FALSE(st);
      CHECK(st.error().code == Errc::mismatch);
    }
  }
  // POLYCOLL_MPI_SHM=0 on one rank: no windows, so not this path either.
  {
    ::setenv("POLYCOLL_MPI_NODE_SIZE", "1", 1);
    if (r == 0) ::setenv("POLYCOLL_MPI_SHM", "0", 1);
    Mpi comm = world();
    std::vector<float> v(100, 1.0f);
    REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
    ::unsetenv("POLYCOLL_MPI_SHM");
    ::unsetenv("POLYCOLL_MPI_NODE_SIZE");
    CHECK(comm.last_all_reduce_algorithm() != "hierarchical");
    CHECK(v[99] == static_cast<float>(w));
  }
  // The decision is made with polycoll's duplicate, after the check: here a
  // broadcast makes both (and the node window, at 3 or more ranks on one
  // node); then the last rank calls all_gather where the others call
  // all_reduce, and every rank must fail the check (in the window's line),
  // none waiting in an MPI call of the decision.
  if (w >= 2) {
    Options o;
    o.check_consistency = true;
    Mpi comm = world(o);
    std::vector<float> b(64, static_cast<float>(r));
    REQUIRE(comm.broadcast(std::span(b), 0));
    std::vector<float> v(4, 1.0f), all(w, 0.0f);
    const float one = 1.0f;
    auto st = r + 1 == w ? comm.all_gather(std::span(&one, 1), std::span(all))
                         : comm.all_reduce(std::span(v), polycoll::sum);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::mismatch);
  }
  // An invalid value: the real nodes serve the next calls.
  invalid_value_fails_everywhere("POLYCOLL_MPI_NODE_SIZE", "two", [](const Mpi& bad) {
    CHECK(bad.last_all_reduce_algorithm() != "hierarchical");
  });
}

// The hierarchical broadcast and reduce (POLYCOLL_MPI_NODE_SIZE, as above):
// MPI among the ranks of the root's index on every node and each node's
// window. Only that path holds a window after a first call above the node
// window's limit (the flat node window takes none that large), which tells
// it served. Checked from every root, at sizes that chunk and that do not,
// in place and out of place at the root, with the non-roots' recv left
// untouched, with the check on, and never for Options::reproducible.
TEST_CASE("POLYCOLL_MPI_NODE_SIZE: the hierarchical broadcast and reduce", "[mpi][algorithms][hierarchical]") {
  int ri = 0, wi = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ri);
  MPI_Comm_size(MPI_COMM_WORLD, &wi);
  const std::size_t r = static_cast<std::size_t>(ri), w = static_cast<std::size_t>(wi);
  const auto with_nodes = [](std::size_t k, const Options& o) {
    ::setenv("POLYCOLL_MPI_NODE_SIZE", std::to_string(k).c_str(), 1);
    Mpi comm = world(o);
    ::unsetenv("POLYCOLL_MPI_NODE_SIZE");
    return comm;
  };
  // The first element of `v` that is not want(i), or v.size().
  const auto first_bad = [](const auto& v, auto&& want) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] != want(i)) return i;
    }
    return v.size();
  };
  const std::size_t tri = w * (w + 1) / 2;
  const bool node = w >= 2 && one_node();
  for (const std::size_t k : {std::size_t{1}, std::size_t{2}}) {
    const bool serves = w % k == 0 && w / k >= 2;
    // The algorithm that serves a call of `bytes` per rank.
    const auto path = [&](std::size_t bytes) -> std::string_view {
      if (serves) return "hierarchical";
      return node && bytes <= detail::mpi::node_shm_to_bytes(w) ? "node window" : "mpi";
    };
    const std::size_t above = detail::mpi::node_shm_to_bytes(k) / 4 + 1000;  // f32: two chunks
    REQUIRE(above * 4 > detail::mpi::node_shm_to_bytes(w));
    for (const bool checked : {false, true}) {
      Options o;
      o.check_consistency = checked;
      for (const bool reduce_first : {false, true}) {
        INFO("nodes of " << k << " at " << w << " ranks" << (checked ? ", checked" : "")
                         << (reduce_first ? ", reduce first" : ", broadcast first"));
        Mpi comm = with_nodes(k, o);
        std::vector<float> v(above, -1.0f);
        if (reduce_first) {
          for (std::size_t i = 0; i < above; ++i) v[i] = static_cast<float>((r + 1) * (i % 7 + 1));
          std::vector<float> out(above, -1.0f);
          REQUIRE(comm.reduce(std::span<const float>(v), std::span(out), polycoll::sum, w - 1));
          CHECK(first_bad(out, [&](std::size_t i) {
                  return r + 1 == w ? static_cast<float>(tri * (i % 7 + 1)) : -1.0f;
                }) == above);
        } else {
          if (r + 1 == w) {
            for (std::size_t i = 0; i < above; ++i) v[i] = static_cast<float>(i % 1009);
          }
          REQUIRE(comm.broadcast(std::span(v), w - 1));
          CHECK(first_bad(v, [](std::size_t i) { return static_cast<float>(i % 1009); }) == above);
        }
        if (w >= 2) CHECK(comm.last_algorithm() == path(above * 4));
        CHECK((comm.shared_window_bytes() > 0) == serves);
        for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, above}) {
          INFO("n=" << n);
          for (std::size_t root = 0; root < w; ++root) {
            INFO("root " << root);
            std::vector<std::int64_t> b(n, -1);
            if (r == root) {
              for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::int64_t>(root * 1000003 + i);
            }
            REQUIRE(comm.broadcast(std::span(b), root));
            if (w >= 2) CHECK(comm.last_algorithm() == path(n * 8));
            CHECK(first_bad(b, [&](std::size_t i) { return static_cast<std::int64_t>(root * 1000003 + i); }) == n);
            // Out of place: f32 sums of small integers (exact in any order),
            // the non-roots' recv untouched.
            std::vector<float> f(n), out(n, -1.0f);
            for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>((r + 1) * (i % 7 + 1));
            REQUIRE(comm.reduce(std::span<const float>(f), std::span(out), polycoll::sum, root));
            if (w >= 2) CHECK(comm.last_algorithm() == path(n * 4));
            CHECK(first_bad(out, [&](std::size_t i) {
                    return r == root ? static_cast<float>(tri * (i % 7 + 1)) : -1.0f;
                  }) == n);
            // In place at the root: i32 max, f64 avg, bf16 sum.
            std::vector<std::int32_t> m(n, static_cast<std::int32_t>(r));
            m[n / 2] = static_cast<std::int32_t>(100 + r);
            REQUIRE(comm.reduce(std::span<const std::int32_t>(m), std::span(m), polycoll::max, root));
            if (r == root) {
              CHECK(first_bad(m, [&](std::size_t i) {
                      return static_cast<std::int32_t>(i == n / 2 ? 100 + w - 1 : w - 1);
                    }) == n);
            }
            std::vector<double> a(n, static_cast<double>(r + 1));
            REQUIRE(comm.reduce(std::span<const double>(a), std::span(a), polycoll::avg, root));
            if (r == root) CHECK(first_bad(a, [&](std::size_t) { return static_cast<double>(w + 1) / 2; }) == n);
            std::vector<bf16> h(n, bf16(static_cast<float>(r + 1)));
            REQUIRE(comm.reduce(std::span<const bf16>(h), std::span(h), polycoll::sum, root));
            if (w >= 2) CHECK(comm.last_algorithm() == path(n * 2));
            if (r == root) {
              CHECK(first_bad(h, [&](std::size_t) { return bf16(static_cast<float>(tri)); }) == n);
            }
          }
        }
      }
    }
    // Reproducible: a reduce in rank order, whatever the nodes.
    Options ro;
    ro.reproducible = true;
    Mpi repro = with_nodes(k, ro);
    std::vector<float> v(100, 0.1f * static_cast<float>(r + 1)), out(100, -1.0f);
    REQUIRE(repro.reduce(std::span<const float>(v), std::span(out), polycoll::sum, 0));
    // (At 2 ranks one binary step per element: every path is rank order.)
    if (w >= 3) CHECK(repro.last_algorithm() == (node ? "node window" : "rank order"));
    float chain = 0.1f;
    for (std::size_t j = 1; j < w; ++j) chain += 0.1f * static_cast<float>(j + 1);
    if (r == 0) CHECK(out[99] == chain);
  }
  // With the check on, a call that differs is caught before the path runs.
  if (w >= 2) {
    Options o;
    o.check_consistency = true;
    Mpi comm = with_nodes(1, o);
    std::vector<float> v(11, 1.0f);
    REQUIRE(comm.broadcast(std::span(v.data(), 10), 0));  // the path decided
    auto st = comm.broadcast(std::span(v.data(), r == 0 ? 10 : 11), 0);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::mismatch);
    st = r == 0 ? comm.broadcast(std::span(v), 0) : comm.reduce(std::span<const float>(v), std::span(v), polycoll::sum, 0);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::mismatch);
  }
}

// With the check on, a first call that differs between ranks fails the
// check on every rank: polycoll's private duplicate (MPI_Comm_dup, made at
// the first all_reduce or node-window collective that may use it) is made
// after the check, so no rank waits in it for ranks that called something
// else. An all_reduce against one of count 0, against a broadcast, and a
// broadcast (the node window's, at 3 or more ranks) against an all_gather.
TEST_CASE("a mismatched first collective fails the check on every rank", "[mpi][check]") {
  int ri = 0, wi = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ri);
  MPI_Comm_size(MPI_COMM_WORLD, &wi);
  if (wi < 2) return;
  Options o;
  o.check_consistency = true;
  std::vector<float> v(4, 1.0f), g(4 * static_cast<std::size_t>(wi), 0.0f);
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    Mpi comm = world(o);
    Status st;
    if (ri == 0 && variant < 2) {
      st = comm.all_reduce(std::span(v), polycoll::sum);
    } else if (variant == 0) {
      st = comm.all_reduce(std::span(v.data(), 0), polycoll::sum);
    } else if (variant == 1 || ri == 0) {
      st = comm.broadcast(std::span(v), 0);
    } else {
      st = comm.all_gather(std::span<const float>(v), std::span(g));
    }
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::mismatch);
  }
}

// The window is freed collectively: a rank whose peer does not come to free it
// within drop_timeout leaves it to MPI_Finalize and says so, instead of
// waiting in MPI_Win_free; the late peer then does not wait either.
TEST_CASE("shared-memory window: teardown with a late rank is bounded", "[mpi][shm][drop]") {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  if (w < 2 || !one_node()) return;
  const std::size_t late = static_cast<std::size_t>(w) - 1;
  Options o;
  o.drop_timeout = 150ms;
  const LogSink old = set_log_sink(&capture);
  {
    std::lock_guard lock(g_log_mutex);
    g_log.clear();
  }
  std::chrono::steady_clock::duration took{};
  std::size_t r = 0;
  {
    Mpi comm = world(o);
    r = comm.rank();
    std::vector<float> v(100, 1.0f);
    REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
    // (At 2 ranks the broadcast makes the node window too: both are freed.)
    REQUIRE(comm.broadcast(std::span(v), 0));
    REQUIRE(comm.shared_window_bytes() > 0);
    CHECK(v[0] == static_cast<float>(w));
    if (r == late) std::this_thread::sleep_for(600ms);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Mpi dying = std::move(comm);
    }
    took = std::chrono::steady_clock::now() - t0;
  }
  set_log_sink(old);
  std::lock_guard lock(g_log_mutex);
  // The first rank to arrive waits out the bound; one that arrives later
  // leaves as soon as it sees the withdrawal, so only the longest wait of
  // all is the bound.
  long long waited = std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), longest = 0;
  REQUIRE(MPI_Allreduce(&waited, &longest, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS);
  CHECK(longest >= 150);
  if (r != late) {
    CHECK(took < 550ms);
  } else {
    CHECK(took < 100ms);  // the others have withdrawn: nothing to wait for
  }
  REQUIRE(g_log.size() == 1);
  INFO(g_log[0]);
  CHECK(contains(g_log[0], "did not all meet within drop_timeout (150 ms) to free the shared-memory window"));
  // One warning for both of the 2-rank windows.
  if (w == 2) CHECK(contains(g_log[0], " and the shared-memory window of the node's collectives"));
  MPI_Barrier(MPI_COMM_WORLD);
  // Both ranks destroying together free the window, quickly and silently.
  g_log.clear();
  set_log_sink(&capture);
  {
    Mpi comm = world(o);
    std::vector<float> v(100, 1.0f);
    REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
    REQUIRE(comm.broadcast(std::span(v), 0));
    REQUIRE(comm.shared_window_bytes() > 0);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Mpi dying = std::move(comm);
    }
    took = std::chrono::steady_clock::now() - t0;
  }
  set_log_sink(old);
  CHECK(took < 100ms);
  CHECK(g_log.empty());
}

// MPICH 4.0.2's MPI_MIN/MPI_MAX compare every unsigned type as signed, and
// Open MPI 4.1.4's do for MPI_UNSIGNED_LONG (detail::mpi::builtin_unsafe):
// polycoll reduces unsigned min/max with its own unit under every policy, at
// every size and in every reducing collective. Values straddle the sign bit.
// A blocking MPI_Allreduce progresses the rank's other MPI traffic while it
// waits; the window's waits must too. Rank 1 is in an MPI_Ssend to rank 0
// (it returns only once rank 0's MPI has matched it) before it joins the
// all_reduce, whose matching receive rank 0 posted before entering it: without
// progress while rank 0 waits for rank 1, both wait forever.
TEST_CASE("shared-memory all_reduce drives MPI's progress while it waits", "[mpi][shm][progress]") {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  if (w < 2 || !one_node()) return;
  Mpi comm = world();
  const std::size_t r = comm.rank();
  for (const std::size_t n : {std::size_t{2}, std::size_t{1000}, std::size_t{100000}}) {  // each algorithm
    INFO("all_reduce of " << n << " floats");
    std::vector<float> v(n, 1.0f);
    std::vector<char> msg(256 * 1024, static_cast<char>(r == 1 ? 42 : 0));
    if (r == 0) {
      MPI_Request req = MPI_REQUEST_NULL;
      REQUIRE(MPI_Irecv(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, 1, 77, MPI_COMM_WORLD, &req) ==
              MPI_SUCCESS);
      REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
      REQUIRE(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      CHECK(msg.back() == 42);
    } else if (r == 1) {
      REQUIRE(MPI_Ssend(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, 0, 77, MPI_COMM_WORLD) == MPI_SUCCESS);
      REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
    } else {
      REQUIRE(comm.all_reduce(std::span(v), polycoll::sum));
    }
    CHECK(comm.shared_window_bytes() > 0);
    CHECK(v[0] == static_cast<float>(w));
    CHECK(v[n - 1] == static_cast<float>(w));
  }
}

TEST_CASE("unsigned min/max across the sign bit, every bundle, small and large", "[mpi][ops][unsigned]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    auto check_type = [&]<class T>(T) {
      constexpr T top = T(T(1) << (8 * sizeof(T) - 1));  // the sign bit
      for (const std::size_t n : {std::size_t{5}, std::size_t{(256 * 1024) / sizeof(T) + 3}}) {
        INFO(sizeof(T) << "-byte unsigned, n " << n);
        // Rank q holds top + (i % 7) - q on odd i (below the sign bit for q > i % 7)
        // and (i % 5) + 3q on even i.
        auto value = [&](std::size_t i, std::size_t q) {
          return i % 2 ? static_cast<T>(top + static_cast<T>(i % 7) - static_cast<T>(q))
                       : static_cast<T>(i % 5 + 3 * q);
        };
        std::vector<T> mn(n), mx(n), send(n * w), rs(n), red(n);
        for (std::size_t i = 0; i < n; ++i) mn[i] = mx[i] = value(i, r);
        for (std::size_t b = 0; b < w; ++b) {
          for (std::size_t i = 0; i < n; ++i) send[b * n + i] = value(i + b, r);
        }
        REQUIRE(comm->all_reduce(std::span(mn), polycoll::min));
        REQUIRE(comm->all_reduce(std::span(mx), polycoll::max));
        REQUIRE(comm->reduce_scatter(std::span<const T>(send), std::span(rs), polycoll::min));
        REQUIRE(comm->reduce(std::span<const T>(send.data(), n), std::span(red), polycoll::max, w - 1));
        REQUIRE(comm->sync());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          T lo = value(i, 0), hi = value(i, 0), lo_rs = value(i + r, 0), hi_red = value(i, 0);
          for (std::size_t q = 1; q < w; ++q) {
            lo = std::min(lo, value(i, q));
            hi = std::max(hi, value(i, q));
            lo_rs = std::min(lo_rs, value(i + r, q));
            hi_red = std::max(hi_red, value(i, q));
          }
          bad += mn[i] != lo;
          bad += mx[i] != hi;
          bad += rs[i] != lo_rs;
          if (r == w - 1) bad += red[i] != hi_red;
        }
        CHECK(bad == 0);
      }
    };
    check_type(std::uint8_t{});
    check_type(std::uint16_t{});
    check_type(std::uint32_t{});
    check_type(std::uint64_t{});
  };
  using namespace polycoll::mpi;
  run(Mpi::world());
  run(BasicMpi<Policies<blocking, builtin_ops>>::world());
  run(BasicMpi<Policies<nonblocking, builtin_ops>>::world());
  run(BasicMpi<Policies<nonblocking, adaptive_ops>>::world());
}

// MPICH 4.0.2's and Open MPI 4.1's MPI_MIN/MPI_MAX drop a NaN of one rank,
// and their complex MPI_PROD is the Annex G product where polycoll's unit
// takes the plain formula (detail::mpi::builtin_unsafe): those pairs reduce
// with polycoll's unit under every policy, at every size and in every
// reducing collective. The sizes reach each path that could take MPI's
// predefined op: below 128 KiB (the user op of adaptive_ops), 8-16 KiB (MPICH's
// 2-rank all_reduce under op_timeout) and above 128 KiB (adaptive_ops'
// predefined op). The expectation is polycoll's unit folded over the ranks.
TEST_CASE("float min/max keep NaN, complex prod is polycoll's, every bundle and size", "[mpi][ops][nan]") {
  auto run = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    auto check_pair = [&]<class T, ReduceOp Op>(T, op_tag<Op> op) {
      constexpr DType D = dtype_of_v<T>;
      // Every block of every collective holds each case. Min/max: element i
      // is NaN on rank 0 where i % 7 == 0, on the last rank where i % 7 == 1,
      // on the middle one where i % 7 == 2; the rest are 1..w. Prod: (inf,
      // inf) on rank 0 where i % 7 == 0 and on the last rank where i % 7 == 1;
      // otherwise i on rank i % w and 1 elsewhere.
      auto value = [&](std::size_t i, std::size_t q) -> T {
        const std::size_t k = i % 7;
        if constexpr (Op == ReduceOp::Prod) {
          using R = typename T::value_type;
          const R inf = std::numeric_limits<R>::infinity();
          if ((k == 0 && q == 0) || (k == 1 && q == w - 1)) return T(inf, inf);
          return q == i % w ? T(0, 1) : T(1, 0);
        } else {
          if ((k == 0 && q == 0) || (k == 1 && q == w - 1) || (k == 2 && q == w / 2)) {
            return std::numeric_limits<T>::quiet_NaN();
          }
          return static_cast<T>((q + i) % w + 1);
        }
      };
      auto expected = [&](std::size_t i) {
        T acc = value(i, 0);
        for (std::size_t q = 1; q < w; ++q) {
          const T b = value(i, q);
          kernels::combine(dtype_tag<D>{}, op, &acc, &acc, &b, 1);
        }
        return acc;
      };
      auto same = [](T a, T b) {
        auto eq = [](auto x, auto y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
        if constexpr (Op == ReduceOp::Prod) {
          return eq(a.real(), b.real()) && eq(a.imag(), b.imag());
        } else {
          return eq(a, b);
        }
      };
      for (const std::size_t bytes : {std::size_t{40}, std::size_t{12 * 1024}, std::size_t{160 * 1024}}) {
        const std::size_t n = bytes / sizeof(T) + 3;
        INFO(name(D) << ' ' << name(Op) << ", n " << n);
        std::vector<T> ar(n), send(n * w), rs(n), red(n);
        for (std::size_t i = 0; i < n; ++i) ar[i] = value(i, r);
        for (std::size_t b = 0; b < w; ++b) {
          for (std::size_t i = 0; i < n; ++i) send[b * n + i] = value(b * n + i, r);
        }
        REQUIRE(comm->all_reduce(std::span(ar), op));
        REQUIRE(comm->reduce_scatter(std::span<const T>(send), std::span(rs), op));
        REQUIRE(comm->reduce(std::span<const T>(send.data(), n), std::span(red), op, w - 1));
        REQUIRE(comm->sync());
        std::size_t bad_ar = 0, bad_rs = 0, bad_red = 0;
        for (std::size_t i = 0; i < n; ++i) {
          bad_ar += !same(ar[i], expected(i));
          bad_rs += !same(rs[i], expected(r * n + i));
          if (r == w - 1) bad_red += !same(red[i], expected(i));
        }
        CHECK(bad_ar == 0);
        CHECK(bad_rs == 0);
        CHECK(bad_red == 0);
      }
    };
    check_pair(float{}, polycoll::min);
    check_pair(float{}, polycoll::max);
    check_pair(double{}, polycoll::min);
    check_pair(double{}, polycoll::max);
    check_pair(std::complex<float>{}, polycoll::prod);
    check_pair(std::complex<double>{}, polycoll::prod);
  };
  using namespace polycoll::mpi;
  Options timed;
  timed.op_timeout = 60s;
  run(Mpi::world());
  run(Mpi::world(timed));
  run(BasicMpi<Policies<blocking, builtin_ops>>::world());
  run(BasicMpi<Policies<nonblocking, builtin_ops>>::world());
  run(BasicMpi<Policies<nonblocking, adaptive_ops>>::world());
}

// The point-to-point 2-rank algorithms (backends/mpi/halving.hpp) serve ranks
// on different nodes, and the halving messages above the window's 4 MiB; on
// one node below that the window takes over, so they are called directly
// here: values, and both ranks' results bit for bit (the exchange reduces in
// the window's operand order; the halving reduces each half once).
TEST_CASE("point-to-point 2-rank exchange and halving, called directly", "[mpi][exchange][halving]") {
  int w = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (w != 2) return;
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  const auto rank = static_cast<std::size_t>(r);
  auto same_everywhere = [&](const auto& v) {
    const std::size_t bytes = v.size() * sizeof(v[0]);
    std::vector<std::byte> all(2 * bytes);
    REQUIRE(MPI_Allgather(v.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                          MPI_BYTE, comm) == MPI_SUCCESS);
    CHECK(std::memcmp(all.data(), all.data() + bytes, bytes) == 0);
  };
  std::vector<std::byte> scratch;
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{257}, std::size_t{100001}}) {
    INFO("n " << n);
    std::vector<float> f(n);
    std::vector<bf16> h(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = static_cast<float>(i % 11 + 3 * rank);
      h[i] = bf16(static_cast<float>(i % 7 + rank));
    }
    auto f2 = f;
    auto h2 = h;
    const bool small = n * sizeof(float) <= detail::mpi::exchange_to_bytes;  // the exchange's sizes
    if (small) {
      CHECK(detail::mpi::exchange_allreduce_2<DType::F32, ReduceOp::Sum>(f.data(), n, rank, comm) == MPI_SUCCESS);
      CHECK(detail::mpi::exchange_allreduce_2<DType::BF16, ReduceOp::Sum>(h.data(), n, rank, comm) == MPI_SUCCESS);
    }
    CHECK(detail::mpi::halving_allreduce_2<DType::F32, ReduceOp::Sum>(f2.data(), n, rank, comm, scratch) ==
          MPI_SUCCESS);
    CHECK(detail::mpi::halving_allreduce_2<DType::BF16, ReduceOp::Sum>(h2.data(), n, rank, comm, scratch) ==
          MPI_SUCCESS);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto want_f = static_cast<float>(2 * (i % 11) + 3);
      const auto want_h = static_cast<float>(2 * (i % 7) + 1);
      if (small) bad += (f[i] != want_f) + (static_cast<float>(h[i]) != want_h);
      bad += (f2[i] != want_f) + (static_cast<float>(h2[i]) != want_h);
    }
    CHECK(bad == 0);
    same_everywhere(f2);
    same_everywhere(h2);
    if (small) {
      same_everywhere(f);
      same_everywhere(h);
    }
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("every policy bundle computes the same results", "[mpi][policies]") {
  auto check = [](auto comm) {
    REQUIRE(comm);
    const std::size_t w = comm->world_size(), r = comm->rank();
    std::vector<f16> a(100, f16(static_cast<float>(r)));
    REQUIRE(comm->all_reduce(std::span(a), polycoll::avg));
    std::vector<std::complex<float>> c(10, {1.0f, static_cast<float>(r)});
    REQUIRE(comm->all_reduce(std::span(c), polycoll::sum));
    std::array<bool, 3> b{r == 0, true, false};
    REQUIRE(comm->all_reduce(std::span(b), polycoll::min));
    std::vector<double> rs(3 * w, static_cast<double>(r)), out(3);
    REQUIRE(comm->reduce_scatter(std::span(rs), std::span(out), polycoll::avg));
    REQUIRE(comm->sync());
    CHECK(static_cast<float>(a[99]) == static_cast<float>(w - 1) / 2.0f);
    CHECK(c[9] == std::complex<float>(static_cast<float>(w), static_cast<float>(w * (w - 1) / 2)));
    CHECK(b[0] == (w == 1));
    CHECK(b[1]);
    CHECK_FALSE(b[2]);
    CHECK(out[2] == static_cast<double>(w - 1) / 2.0);
  };
  using namespace polycoll::mpi;
  check(BasicMpi<Policies<blocking, builtin_ops>>::world());
  check(BasicMpi<Policies<blocking, kernel_ops>>::world());
  check(BasicMpi<Policies<nonblocking, builtin_ops>>::world());
  check(BasicMpi<Policies<nonblocking, kernel_ops>>::world());
}

// Options::reproducible (tests/reproducible.hpp, docs/reliability.md): every
// reduction form gives the bits of the rank-order fold, which Threads computes
// too: under both completion policies, with op_timeout (the timed MPI_I*
// steps), through AnyCommunicator, and with POLYCOLL_REPRODUCIBLE=1.
TEST_CASE("reproducible: every reduction is the rank-order fold", "[mpi][reproducible]") {
  Options o;
  o.reproducible = true;
  {
    Mpi comm = world(o);
    CHECK(comm.options().reproducible);
    CHECK(test::reproducible::check(comm) == "");
  }
  {
    using namespace polycoll::mpi;
    auto nb = BasicMpi<Policies<nonblocking, kernel_ops>>::world(o);
    REQUIRE(nb);
    CHECK(test::reproducible::check(*nb) == "");
  }
  {
    Options timed = o;
    timed.op_timeout = 60s;
    AnyCommunicator any{world(timed)};
    CHECK(test::reproducible::check(any) == "");
  }
  ::setenv("POLYCOLL_REPRODUCIBLE", "1", 1);
  Mpi from_env = world();
  ::unsetenv("POLYCOLL_REPRODUCIBLE");
  CHECK(from_env.options().reproducible);
  auto sub = from_env.split(0, static_cast<std::uint32_t>(from_env.world_size() - from_env.rank()));
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  CHECK((*sub)->options().reproducible);
  CHECK(test::reproducible::check(**sub) == "");
}

// The fold of the reproducible path above 64 ranks goes on in passes into
// its output (backends/mpi/ordered.hpp); its bits must stay those of one
// binary step at a time. Rank-local: no communication.
TEST_CASE("reproducible: the rank-order fold of more than 64 contributions", "[mpi][reproducible]") {
  auto fold_matches = []<class T, ReduceOp Op>(std::size_t p, std::size_t n) {
    constexpr DType D = dtype_of_v<T>;
    std::vector<T> all;
    for (std::size_t q = 0; q < p; ++q) {
      const auto x = test::reproducible::inputs<T>(q, n, 5);
      all.insert(all.end(), x.begin(), x.end());
    }
    std::vector<T> want(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t q = 1; q < p; ++q) {
      kernels::combine(dtype_tag<D>{}, op_tag<Op>{}, want.data(), want.data(), all.data() + q * n, n);
    }
    if constexpr (Op == ReduceOp::Avg) kernels::divide(dtype_tag<D>{}, want.data(), n, p);
    std::vector<T> got(n);
    detail::mpi::fold_ranks<D, Op>(got.data(), all.data(), n, p, n);
    return std::memcmp(got.data(), want.data(), n * sizeof(T)) == 0;
  };
  for (std::size_t p : {63u, 64u, 65u, 127u, 128u, 129u, 200u}) {
    INFO(p << " contributions");
    CHECK(fold_matches.template operator()<float, ReduceOp::Sum>(p, 37));
    CHECK(fold_matches.template operator()<f16, ReduceOp::Avg>(p, 37));
    CHECK(fold_matches.template operator()<double, ReduceOp::Prod>(p, 37));
    CHECK(fold_matches.template operator()<std::complex<float>, ReduceOp::Avg>(p, 37));
  }
}

// A reproducible reduction that times out stays one posted collective, as
// every other does: a later sync() completes it once the late ranks call,
// and the result is the rank-order fold.
TEST_CASE("reproducible: a timed-out reduction completes at a later sync", "[mpi][reproducible][timeout]") {
  Options o;
  o.reproducible = true;
  o.op_timeout = 100ms;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  for (const std::size_t n : {std::size_t{7}, std::size_t{20001}}) {
    INFO(n << " elements");
    const auto want = test::reproducible::fold<float, ReduceOp::Sum>(w, n, 3);
    std::vector<float> buf = test::reproducible::inputs<float>(r, n, 3);
    // Rank 0 calls alone and times out (with one rank it completes at once);
    // the others call after it has.
    if (r == 0) {
      const Status s = comm.all_reduce(std::span(buf), polycoll::sum);
      if (w > 1) {
        REQUIRE_FALSE(s);
        CHECK(s.error().code == Errc::timeout);
        CHECK(contains(s.error().message, "all_reduce(count=" + std::to_string(n)));
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (r != 0) {
      const Status s = comm.all_reduce(std::span(buf), polycoll::sum);
      CHECK((s || s.error().code == Errc::timeout));
    }
    CHECK(sync_until_done(comm));
    CHECK(std::memcmp(buf.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(comm.pending() == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("AnyCommunicator holds an Mpi", "[mpi][any]") {
  AnyCommunicator any{world()};
  CHECK(any.backend_name() == "mpi");
  REQUIRE(any.target<Mpi>() != nullptr);
  std::array<std::uint8_t, 5> v{1, 1, 1, 1, 1};
  CHECK(any.all_reduce(detail::to_address(v.data()), v.size(), DType::U8, ReduceOp::Sum));
  CHECK(any.sync());
  CHECK(v[4] == static_cast<std::uint8_t>(any.world_size()));
  auto sub = any.split(0, 0);
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  CHECK((*sub)->world_size() == any.world_size());
}

#if POLYCOLL_HAS_BOOST_MPI
TEST_CASE("Boost.MPI interop: from_boost borrows, to_boost attaches", "[mpi][boost]") {
  boost::mpi::environment env;  // MPI is already initialised: Boost owns nothing
  boost::mpi::communicator bworld;
  {
    auto comm = mpi::from_boost(bworld);
    REQUIRE(comm);
    CHECK(comm->native() == static_cast<MPI_Comm>(bworld));
    CHECK_FALSE(comm->owns_comm());
    CHECK(comm->world_size() == static_cast<std::size_t>(bworld.size()));
    CHECK(comm->rank() == static_cast<std::size_t>(bworld.rank()));
    std::array<float, 4> v{1, 1, 1, 1};
    CHECK(comm->all_reduce(std::span(v), polycoll::sum));
    CHECK(v[3] == static_cast<float>(bworld.size()));
  }
  auto own = Mpi::duplicate(static_cast<MPI_Comm>(bworld));
  REQUIRE(own);
  boost::mpi::communicator view = mpi::to_boost(*own);
  CHECK(static_cast<MPI_Comm>(view) == own->native());
  const int total = boost::mpi::all_reduce(view, view.rank() + 1, std::plus<int>());
  CHECK(total == view.size() * (view.size() + 1) / 2);
}
#endif

}  // namespace

namespace {

// A send completes at sync(): with the check on, a send buffer changed
// before then is Errc::mismatch on the sender's sync(), naming the send; the
// small one was copied at post, so the receiver got what was sent.
TEST_CASE("consistency check: a send buffer changed before sync() is Errc::mismatch", "[mpi][check][p2p]") {
  Options o;
  o.check_consistency = true;
  Mpi comm = world(o);
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::int32_t length = 0;
  std::array<std::int32_t, 3> got{};
  for (std::int32_t i = 0; i < 3; ++i) {
    length = 100 + i;
    REQUIRE(comm.send(std::span<const std::int32_t>(&length, 1), next, 5));
  }
  for (auto& g : got) REQUIRE(comm.recv(std::span<std::int32_t>(&g, 1), prev, 5));
  const Status s = comm.sync();
  REQUIRE_FALSE(s);
  INFO(s.error().message);
  CHECK(s.error().code == Errc::mismatch);
  CHECK(contains(s.error().message, "send(count=1, dtype=i32, dest=" + std::to_string(next) + ", tag=5)"));
  CHECK(contains(s.error().message, "[mpi]: consistency check failed: the send buffer changed"));
  CHECK(got == (std::array<std::int32_t, 3>{100, 101, 102}));
  CHECK(comm.sync());  // forgotten once reported
  CHECK(comm.barrier());
}

// Probe sees a message a receive posted now would take, not one an earlier
// posted (unmatched) receive will take.
TEST_CASE("probe does not report a message an earlier posted receive takes", "[mpi][p2p][probe]") {
  Mpi comm = world();
  const std::size_t w = comm.world_size(), r = comm.rank();
  const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
  std::array<std::int32_t, 2> in{}, out{7, 8};
  REQUIRE(comm.recv(in, prev, 21));  // posted before the message exists
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(comm.send(out, next, 21));
  for (int here = 0; !here;) MPI_Iprobe(static_cast<int>(prev), 21, comm.native(), &here, MPI_STATUS_IGNORE);
  auto p = comm.probe(any_source, 21, DType::I32);
  REQUIRE(p);
  CHECK_FALSE(p->has_value());
  REQUIRE(comm.sync());
  CHECK(in == out);
  CHECK(comm.barrier());
}

}  // namespace

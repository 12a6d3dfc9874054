// Threads-specific behaviour: timeouts, the drop contract, concurrent
// submission from several threads of one rank, p2p errors, oversubscription.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/threads.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "count_allocations.hpp"

using polycoll::test::g_allocations;

namespace {

using namespace polycoll;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::mutex g_log_mutex;
std::vector<std::string> g_log;
void capture(LogLevel, std::string_view m) noexcept {
  std::lock_guard lock(g_log_mutex);
  g_log.emplace_back(m);
}

std::vector<Threads> make(std::size_t n, Options o = {}) {
  auto c = Threads::create(n, o);
  REQUIRE(c);
  return std::move(*c);
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

TEST_CASE("create(0) and moved-from communicators are errors, not crashes", "[threads][errors]") {
  auto none = Threads::create(0);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::invalid_argument);
  auto comms = make(1);
  Threads a = std::move(comms[0]);
  Threads& moved = comms[0];
  std::array<float, 2> v{};
  const Status s = moved.all_reduce(std::span<float>(v), polycoll::sum);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::invalid_argument);
  CHECK(s.error().message.find("moved-from") != std::string::npos);
  CHECK(a.all_reduce(std::span<float>(v), polycoll::sum));
}

TEST_CASE("a rank that never arrives: the others time out, naming it and the call", "[threads][timeout]") {
  Options o;
  o.op_timeout = 100ms;
  auto comms = make(3, o);
  std::array<Status, 2> results;
  std::array<double, 2> elapsed{};
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      std::vector<float> v(1000, 1.0f);
      const auto t0 = Clock::now();
      results[r] = comms[r].all_reduce(std::span<float>(v), polycoll::sum);
      elapsed[r] = ms_since(t0);
    });
  }
  for (auto& t : ts) t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE_FALSE(results[r]);
    const auto& e = results[r].error();
    INFO(e.message);
    // The first to expire reports the timeout; the other may see the abort it caused.
    CHECK((e.code == Errc::timeout || e.code == Errc::aborted));
    if (e.code == Errc::timeout) {
      CHECK(e.message.find("waiting for rank(s) 2") != std::string::npos);
      CHECK(e.message.find("#1 all_reduce(count=1000, dtype=f32, op=sum)") != std::string::npos);
      CHECK(e.message.find("of 3 [threads]") != std::string::npos);
    }
    CHECK(elapsed[r] < 110.0 + 50.0);  // timeout + 10%, plus scheduling slack on 2 shared cores
    CHECK(elapsed[r] >= 95.0 * (e.code == Errc::timeout ? 1 : 0));
  }
  CHECK((results[0].error().code == Errc::timeout || results[1].error().code == Errc::timeout));
  // The late rank finds the communicator aborted.
  std::vector<float> v(1000);
  const Status late = comms[2].all_reduce(std::span<float>(v), polycoll::sum);
  REQUIRE_FALSE(late);
  CHECK(late.error().code == Errc::aborted);
}

TEST_CASE("sync and barrier time out listing the pending operations", "[threads][timeout]") {
  Options o;
  o.op_timeout = 80ms;
  SECTION("unmatched recv") {
    auto comms = make(2, o);
    std::array<float, 4> buf{};
    REQUIRE(comms[0].recv(std::span<float>(buf), 1, 3));
    const auto t0 = Clock::now();
    const Status s = comms[0].sync();
    const double ms = ms_since(t0);
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::timeout);
    INFO(s.error().message);
    CHECK(s.error().message.find("recv(count=4, dtype=f32, src=1, tag=3)") != std::string::npos);
    CHECK(ms >= 75.0);
    CHECK(ms < 88.0 + 50.0);
  }
  SECTION("barrier without the peer") {
    auto comms = make(2, o);
    const Status s = comms[1].barrier();
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::timeout);
    CHECK(s.error().message.find("barrier() on rank 1 of 2 [threads]") != std::string::npos);
    CHECK(s.error().message.find("rank(s) 0") != std::string::npos);
  }
}

TEST_CASE("drop contract: destroying a rank with an unmatched recv returns within drop_timeout and logs",
          "[threads][drop]") {
  Options o;
  o.drop_timeout = 50ms;
  auto comms = make(2, o);
  g_log.clear();
  const LogSink previous = set_log_sink(&capture);
  std::array<double, 8> buf{};
  REQUIRE(comms[0].recv(std::span<double>(buf), 1, 42));
  const auto t0 = Clock::now();
  {
    Threads dying = std::move(comms[0]);
  }
  const double ms = ms_since(t0);
  set_log_sink(previous);
  CHECK(ms >= 45.0);
  CHECK(ms < 55.0 + 150.0);
  REQUIRE(g_log.size() == 1);
  CHECK(g_log[0].find("recv(count=8, dtype=f64, src=1, tag=42)") != std::string::npos);
  CHECK(g_log[0].find("rank 0 of 2") != std::string::npos);
  // The withdrawn recv is gone: a late send from the peer stays unmatched and
  // never touches the destroyed rank's buffer.
  buf.fill(-1.0);
  std::array<double, 8> out{};
  REQUIRE(comms[1].send(std::span<const double>(out), 0, 42));
  CHECK(buf[0] == -1.0);
}

TEST_CASE("drop contract: matched work finishes without waiting", "[threads][drop]") {
  auto comms = make(2);
  std::array<int, 3> a{1, 2, 3}, b{};
  REQUIRE(comms[0].send(std::span<const int>(a), 1, 0));
  REQUIRE(comms[1].recv(std::span<int>(b), 0, 0));
  const auto t0 = Clock::now();
  { Threads gone = std::move(comms[0]); }
  CHECK(ms_since(t0) < 20.0);
  REQUIRE(comms[1].sync());
  CHECK(b[2] == 3);
}

TEST_CASE("p2p errors: truncation names peer, tag and both counts; dtype mismatch", "[threads][p2p][errors]") {
  auto comms = make(2);
  std::array<float, 8> big{};
  std::array<float, 4> small{};
  REQUIRE(comms[0].send(std::span<const float>(big), 1, 5));
  REQUIRE(comms[1].recv(std::span<float>(small), 0, 5));
  REQUIRE(comms[0].sync());
  const Status s = comms[1].sync();
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::truncated);
  INFO(s.error().message);
  CHECK(s.error().message.find("recv(count=4, dtype=f32, src=0, tag=5) on rank 1 of 2 [threads]") != std::string::npos);
  CHECK(s.error().message.find("rank 0 sent 8 elements with tag 5") != std::string::npos);
  CHECK(comms[1].sync());  // the error is reported once

  std::array<std::int32_t, 4> ints{};
  REQUIRE(comms[0].send(std::span<const float>(small), 1, 6));
  REQUIRE(comms[1].recv(std::span<std::int32_t>(ints), 0, 6));
  const Status m = comms[1].sync();
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::mismatch);
}

TEST_CASE("two threads of each rank submit at once without corruption", "[threads][concurrency]") {
  constexpr std::size_t n = 3, iters = 200;
  auto comms = make(n);
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < n; ++r) {
    for (int t = 0; t < 2; ++t) {
      ts.emplace_back([&, r, t] {
        // Both threads of a rank submit identical calls, so whichever order the
        // per-rank serialisation picks, every result is the same closed form.
        std::vector<std::int64_t> v(16 + 0 * t);
        for (std::size_t i = 0; i < iters; ++i) {
          std::fill(v.begin(), v.end(), static_cast<std::int64_t>(r + 1));
          if (!comms[r].all_reduce(std::span<std::int64_t>(v), polycoll::sum)) ++wrong;
          if (v[15] != static_cast<std::int64_t>(n * (n + 1) / 2)) ++wrong;
        }
      });
    }
  }
  for (auto& t : ts) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("concurrent p2p posts from two threads of each rank", "[threads][concurrency][p2p]") {
  // sync() is rank-wide (it waits for every thread's operations), so the
  // threads only post; one sync per rank follows.
  auto comms = make(2);
  constexpr std::uint32_t per_thread = 300;
  std::vector<std::array<int, 16>> out(2 * per_thread), in(2 * per_thread);
  std::atomic<int> wrong{0};
  auto sender = [&](std::uint32_t first) {
    for (std::uint32_t t = first; t < first + per_thread; ++t) {
      out[t].fill(static_cast<int>(t) * 10 + 1);
      if (!comms[0].send(std::span<const int>(out[t]), 1, t)) ++wrong;
    }
  };
  auto receiver = [&](std::uint32_t first) {
    for (std::uint32_t t = first + per_thread; t-- > first;) {  // reverse order: matching is by tag
      if (!comms[1].recv(std::span<int>(in[t]), 0, t)) ++wrong;
    }
  };
  std::thread a(sender, 0u), b(sender, per_thread), c(receiver, 0u), d(receiver, per_thread);
  a.join();
  b.join();
  c.join();
  d.join();
  std::thread s0([&] { if (!comms[0].sync()) ++wrong; });
  if (!comms[1].sync()) ++wrong;
  s0.join();
  for (std::uint32_t t = 0; t < 2 * per_thread; ++t) {
    if (in[t][15] != static_cast<int>(t) * 10 + 1) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("8 ranks on 2 cores make progress", "[threads][oversubscribed]") {
  std::atomic<int> wrong{0};
  const auto t0 = Clock::now();
  const Status s = Threads::run(8, [&](Threads& comm) {
    std::array<double, 4> v{};
    for (int i = 0; i < 2000; ++i) {
      v.fill(1.0);
      if (!comm.all_reduce(std::span<double>(v), polycoll::sum) || v[0] != 8.0) ++wrong;
    }
    if (!comm.barrier()) ++wrong;
  });
  REQUIRE(s);
  CHECK(wrong == 0);
  WARN("8 ranks x 2000 all_reduce(4 x f64): " << ms_since(t0) << " ms");
}

TEST_CASE("consistency check: mismatched calls are Errc::mismatch on every rank", "[threads][check]") {
  Options o;
  o.check_consistency = true;
  auto comms = make(2, o);
  std::array<Status, 2> res;
  std::thread t([&] {
    std::vector<float> v(5);
    res[1] = comms[1].all_reduce(std::span<float>(v), polycoll::max);
  });
  std::vector<float> v(4);
  res[0] = comms[0].all_reduce(std::span<float>(v), polycoll::sum);
  t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE_FALSE(res[r]);
    CHECK(res[r].error().code == Errc::mismatch);
    INFO(res[r].error().message);
    CHECK(res[r].error().message.find("consistency check failed") != std::string::npos);
  }
  CHECK(res[0].error().message.find("rank 1 called #1 all_reduce(count=5, dtype=f32, op=max)") != std::string::npos);
  CHECK(res[1].error().message.find("rank 0 called #1 all_reduce(count=4, dtype=f32, op=sum)") != std::string::npos);
  // Matching calls still work afterwards.
  std::thread t2([&] {
    std::vector<float> w(3, 1.0f);
    res[1] = comms[1].all_reduce(std::span<float>(w), polycoll::sum);
  });
  std::vector<float> w(3, 2.0f);
  res[0] = comms[0].all_reduce(std::span<float>(w), polycoll::sum);
  t2.join();
  CHECK(res[0]);
  CHECK(res[1]);
  CHECK(w[0] == 3.0f);
}

TEST_CASE("v-collectives: counts that disagree between ranks are errors, not corruption", "[threads][errors][v]") {
  auto comms = make(2);
  std::array<Status, 2> res;
  std::array<std::vector<std::int32_t>, 2> got;
  auto body = [&](std::size_t r) {
    // Rank 0 believes rank 1 sends 3 elements; rank 1 sends 2.
    const std::vector<std::size_t> counts = r == 0 ? std::vector<std::size_t>{1, 3} : std::vector<std::size_t>{1, 2};
    std::vector<std::int32_t> mine(counts[r], static_cast<std::int32_t>(r + 1));
    got[r].assign(counts[0] + counts[1], -1);
    res[r] = comms[r].all_gather_v(std::span<const std::int32_t>(mine), std::span<std::int32_t>(got[r]), counts);
  };
  std::thread t(body, 1);
  body(0);
  t.join();
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error().code == Errc::mismatch);
  CHECK(res[0].error().message.find("rank 1 sends 2, recv_counts[1] = 3") != std::string::npos);
  CHECK(got[0][1] == -1);  // the disagreeing block is left alone
  CHECK(got[0][0] == 1);
  REQUIRE(res[1]);  // rank 1's view (1, 2) agrees with what it received
  CHECK(got[1][2] == 2);

  // all_to_all_v: rank 1 sends 4 elements to rank 0, which expects 2: truncated.
  auto body2 = [&](std::size_t r) {
    const std::vector<std::size_t> sc = r == 0 ? std::vector<std::size_t>{1, 1} : std::vector<std::size_t>{4, 1};
    const std::vector<std::size_t> rc = r == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{1, 1};
    std::vector<std::int32_t> out(sc[0] + sc[1], 7), in(rc[0] + rc[1], -1);
    res[r] = comms[r].all_to_all_v(std::span<const std::int32_t>(out), sc, std::span<std::int32_t>(in), rc);
  };
  std::thread t2(body2, 1);
  body2(0);
  t2.join();
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error().code == Errc::truncated);
  CHECK(res[0].error().message.find("rank 1 sends 4, recv_counts[1] = 2") != std::string::npos);
  CHECK(res[1]);
  // Both ranks passed the closing phase: the communicator still works.
  std::thread t3([&] { res[1] = comms[1].barrier(); });
  res[0] = comms[0].barrier();
  t3.join();
  CHECK(res[0]);
  CHECK(res[1]);
}

TEST_CASE("consistency check: a reduce to different roots is Errc::mismatch on every rank", "[threads][check]") {
  Options o;
  o.check_consistency = true;
  auto comms = make(3, o);
  std::array<Status, 3> res;
  auto body = [&](std::size_t r) {
    std::vector<float> v(4, 1.0f), out(4);
    const std::size_t root = r == 2 ? 1 : 0;  // rank 2 names another root
    res[r] = comms[r].reduce(std::span<const float>(v), std::span<float>(out), polycoll::sum, root);
  };
  std::vector<std::thread> ts;
  for (std::size_t r = 1; r < 3; ++r) ts.emplace_back(body, r);
  body(0);
  for (auto& t : ts) t.join();
  for (std::size_t r = 0; r < 3; ++r) {
    REQUIRE_FALSE(res[r]);
    CHECK(res[r].error().code == Errc::mismatch);
  }
  CHECK(res[0].error().message.find("rank 2 called #1 reduce(count=4, dtype=f32, op=sum, root=1)") !=
        std::string::npos);
}

TEST_CASE("a rank that never joins a gather: the others time out naming the call", "[threads][timeout]") {
  Options o;
  o.op_timeout = 150ms;
  auto comms = make(3, o);
  std::array<Status, 2> res;
  auto body = [&](std::size_t r) {
    std::vector<double> mine(2, 1.0), all(6);
    res[r] = comms[r].gather(std::span<const double>(mine), std::span<double>(all), 0);
  };
  const auto t0 = Clock::now();
  std::thread t(body, 1);
  body(0);
  t.join();
  const double ms = ms_since(t0);
  CHECK(ms < 150 * 1.1 + 100);
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE_FALSE(res[r]);
    INFO(res[r].error().message);
    CHECK((res[r].error().code == Errc::timeout || res[r].error().code == Errc::aborted));
  }
  const Status& timed_out = res[0].error().code == Errc::timeout ? res[0] : res[1];
  CHECK(timed_out.error().message.find("gather(count=2, dtype=f64, root=0)") != std::string::npos);
  CHECK(timed_out.error().message.find("rank(s) 2") != std::string::npos);
}

TEST_CASE("Threads through AnyCommunicator", "[threads][any]") {
  auto comms = make(2);
  std::vector<AnyCommunicator> any;
  for (auto& c : comms) any.emplace_back(std::move(c));
  std::array<std::array<float, 3>, 2> bufs{};
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      bufs[r].fill(static_cast<float>(r + 1));
      (void)any[r].all_reduce(detail::to_address(bufs[r].data()), 3, DType::F32, ReduceOp::Max);
    });
  }
  for (auto& t : ts) t.join();
  CHECK(bufs[0][2] == 2.0f);
  CHECK(bufs[1][0] == 2.0f);
  CHECK(any[0].backend_name() == "threads");
  CHECK(any[1].target<Threads>() != nullptr);
}

}  // namespace

namespace {

TEST_CASE("no allocation on the hot path: every collective, both paths, and p2p", "[threads][memory]") {
  {  // the counter sees allocations
    const std::size_t before = g_allocations.load();
    auto probe = std::make_unique<std::vector<int>>(8);
    CHECK(g_allocations.load() >= before + 2);
  }
  for (const std::size_t n : {2u, 3u, 4u}) {
    auto comms = make(n);
    constexpr std::size_t big = 1 << 16;  // 256 KiB of f32 per rank: the large path
    std::vector<std::vector<float>> a(n, std::vector<float>(big * n)), b(n, std::vector<float>(big * n));
    std::atomic<std::size_t> during{0};
    std::atomic<int> failed{0};
    std::vector<std::thread> ts;
    std::atomic<std::size_t> ready{0};
    for (std::size_t r = 0; r < n; ++r) {
      ts.emplace_back([&, r] {
        auto& c = comms[r];
        float* x = a[r].data();
        float* y = b[r].data();
        std::vector<std::size_t> counts(n);
        auto round = [&] {
          for (const std::size_t count : {std::size_t{2}, std::size_t{1000}, big}) {
            std::fill(counts.begin(), counts.end(), count);
            if (!c.all_reduce(std::span<float>(x, count), polycoll::sum)) ++failed;
            if (!c.broadcast(std::span<float>(x, count), n - 1)) ++failed;
            if (!c.all_gather(std::span<const float>(x, count), std::span<float>(y, count * n))) ++failed;
            if (!c.reduce_scatter(std::span<const float>(y, count * n), std::span<float>(x, count), polycoll::max))
              ++failed;
            if (!c.send(std::span<const float>(x, count), (r + 1) % n, 7)) ++failed;
            if (!c.recv(std::span<float>(y, count), (r + n - 1) % n, 7)) ++failed;
            if (!c.sync()) ++failed;
            if (!c.reduce(std::span<const float>(x, count), std::span<float>(y, r == 0 ? count : 0), polycoll::sum, 0))
              ++failed;
            if (!c.gather(std::span<const float>(x, count), std::span<float>(y, r == 1 ? count * n : 0), 1)) ++failed;
            if (!c.scatter(std::span<const float>(y, r == 0 ? count * n : 0), std::span<float>(x, count), 0)) ++failed;
            if (!c.all_to_all(std::span<const float>(x, count * n), std::span<float>(y, count * n))) ++failed;
            if (!c.all_gather_v(std::span<const float>(x, count), std::span<float>(y, count * n), counts)) ++failed;
            if (!c.all_to_all_v(std::span<const float>(x, count * n), counts, std::span<float>(y, count * n), counts))
              ++failed;
            if (!c.send_recv(std::span<const float>(x, count), (r + 1) % n, std::span<float>(y, count), (r + n - 1) % n, 8))
              ++failed;
            if (!c.sync()) ++failed;
          }
          if (!c.barrier()) ++failed;
        };
        round();  // warm-up: first use may size the mailboxes
        ready.fetch_add(1);
        while (ready.load() < n) std::this_thread::yield();
        const std::size_t before = g_allocations.load();
        for (int i = 0; i < 20; ++i) round();
        if (!c.barrier()) ++failed;
        during.fetch_add(g_allocations.load() - before);
      });
    }
    for (auto& t : ts) t.join();
    CHECK(failed == 0);
    // Every thread measured a window that contains only the ranks' own calls.
    CHECK(during == 0);
  }
}

}  // namespace

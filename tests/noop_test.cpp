// NoOp-specific behaviour: the drop contract. NoOp is a world of one; its
// only state that can be pending is send/recv to itself, which complete (or
// fail) at sync()/barrier(). A NoOp destroyed (or assigned over) with such
// operations still pending returns at once, logs one record through log.hpp
// naming them, and withdraws them: a dropped recv's buffer is never written
// later. After every other kind of call nothing is pending, and destruction is
// immediate and silent.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reproducible.hpp"

namespace {

using namespace polycoll;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

static_assert(std::is_nothrow_destructible_v<NoOp>);
static_assert(std::is_nothrow_move_constructible_v<NoOp>);
static_assert(std::is_nothrow_move_assignable_v<NoOp>);
static_assert(std::is_nothrow_destructible_v<AnyCommunicator>);

struct Record {
  LogLevel level;
  std::string message;
};
std::mutex g_log_mutex;
std::vector<Record> g_log;
void capture(LogLevel level, std::string_view m) noexcept {
  std::lock_guard lock(g_log_mutex);
  g_log.push_back({level, std::string(m)});
}

// Captures the log for the lifetime of the object; restores the previous sink.
struct LogCapture {
  LogSink previous;
  LogCapture() : previous(set_log_sink(&capture)) {
    std::lock_guard lock(g_log_mutex);
    g_log.clear();
  }
  ~LogCapture() { set_log_sink(previous); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<Record> records() const {
    std::lock_guard lock(g_log_mutex);
    return g_log;
  }
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The drop contract's bound: destruction never waits longer than this. NoOp
// has nothing to wait for, so it must return well inside it.
constexpr auto drop_timeout = 100ms;
Options drop_options() {
  Options o;
  o.drop_timeout = drop_timeout;
  return o;
}

// Destroys `comm` in a scope of its own and returns how long that took.
template <class C>
double destroy(C&& comm) {
  const auto t0 = Clock::now();
  { [[maybe_unused]] std::remove_cvref_t<C> gone = std::move(comm); }
  return ms_since(t0);
}

TEST_CASE("NoOp drop: an unmatched send to self is dropped, logged once, at once", "[noop][drop]") {
  LogCapture log;
  NoOp comm(drop_options());
  std::array<float, 4> out{1, 2, 3, 4};
  REQUIRE(comm.send(std::span<const float>(out), 0, 1));
  const double ms = destroy(std::move(comm));
  WARN("NoOp destroyed with 1 pending send: " << ms << " ms");
  CHECK(ms < static_cast<double>(drop_timeout.count()));
  const auto rec = log.records();
  REQUIRE(rec.size() == 1);
  INFO(rec[0].message);
  CHECK(rec[0].level == LogLevel::warning);
  CHECK(rec[0].message.find("NoOp communicator destroyed with 1 pending") != std::string::npos);
  CHECK(rec[0].message.find("send(count=4, dtype=f32, dest=0, tag=1)") != std::string::npos);
  CHECK(rec[0].message.find("dropped") != std::string::npos);
}

TEST_CASE("NoOp drop: an unmatched recv is dropped and logged; its buffer is left alone", "[noop][drop]") {
  LogCapture log;
  std::array<std::int64_t, 3> in{-1, -1, -1};
  {
    NoOp comm(drop_options());
    REQUIRE(comm.recv(std::span<std::int64_t>(in), 0, 77));
    const double ms = destroy(std::move(comm));
    CHECK(ms < static_cast<double>(drop_timeout.count()));
  }
  CHECK(in == std::array<std::int64_t, 3>{-1, -1, -1});
  const auto rec = log.records();
  REQUIRE(rec.size() == 1);
  INFO(rec[0].message);
  CHECK(rec[0].level == LogLevel::warning);
  CHECK(rec[0].message.find("recv(count=3, dtype=i64, src=0, tag=77)") != std::string::npos);
}

TEST_CASE("NoOp drop: a matched but unsynced pair is either completed silently or dropped and logged",
          "[noop][drop]") {
  // send/recv complete at sync(); destroyed before it, the pair is pending work.
  // The contract allows either outcome, but never a write without a record of
  // the drop, nor a silent drop.
  LogCapture log;
  std::array<int, 5> out{1, 2, 3, 4, 5}, in{};
  in.fill(-1);
  {
    NoOp comm(drop_options());
    REQUIRE(comm.send(std::span<const int>(out), 0, 3));
    REQUIRE(comm.recv(std::span<int>(in), 0, 3));
    const double ms = destroy(std::move(comm));
    CHECK(ms < static_cast<double>(drop_timeout.count()));
  }
  const auto rec = log.records();
  const bool delivered = in == out;
  const bool untouched = in == std::array<int, 5>{-1, -1, -1, -1, -1};
  CHECK((delivered || untouched));
  if (delivered) {
    CHECK(rec.empty());
  } else {
    REQUIRE(rec.size() == 1);
    INFO(rec[0].message);
    CHECK(rec[0].message.find("with 2 pending") != std::string::npos);
  }
  WARN("NoOp destroyed with a matched, unsynced send/recv pair: "
       << (delivered ? "delivered silently" : "dropped (recv buffer untouched), logged: " + rec.at(0).message));
}

TEST_CASE("NoOp drop: many pending operations are dropped at once, in one record", "[noop][drop]") {
  LogCapture log;
  constexpr std::uint32_t count = 20000;
  std::vector<std::array<double, 2>> bufs(count);
  NoOp comm(drop_options());
  std::uint32_t failed = 0;
  for (std::uint32_t t = 0; t < count; ++t) {
    // Distinct tags for sends and recvs: nothing matches.
    const Status s = t % 2 == 0 ? comm.send(std::span<const double>(bufs[t]), 0, t)
                                : comm.recv(std::span<double>(bufs[t]), 0, t + count);
    if (!s) ++failed;
  }
  REQUIRE(failed == 0);
  const double ms = destroy(std::move(comm));
  WARN("NoOp destroyed with " << count << " pending send/recv: " << ms << " ms");
  CHECK(ms < static_cast<double>(drop_timeout.count()));
  const auto rec = log.records();
  REQUIRE(rec.size() == 1);
  CHECK(rec[0].message.find("with " + std::to_string(count) + " pending") != std::string::npos);
}

TEST_CASE("NoOp drop: after every kind of call nothing is pending; destruction is immediate and silent",
          "[noop][drop]") {
  LogCapture log;
  NoOp comm(drop_options());
  std::array<float, 4> a{1, 2, 3, 4}, b{};
  std::array<std::size_t, 1> counts{4};
  REQUIRE(comm.all_reduce(std::span<float>(a), polycoll::sum));
  REQUIRE(comm.all_reduce(std::span<float>(a), ReduceOp::Max));
  REQUIRE(comm.broadcast(std::span<float>(a), 0));
  REQUIRE(comm.all_gather(std::span<const float>(a), std::span<float>(b)));
  REQUIRE(comm.reduce_scatter(std::span<const float>(a), std::span<float>(b), polycoll::sum));
  REQUIRE(comm.reduce(std::span<const float>(a), std::span<float>(b), polycoll::sum, 0));
  REQUIRE(comm.gather(std::span<const float>(a), std::span<float>(b), 0));
  REQUIRE(comm.scatter(std::span<const float>(a), std::span<float>(b), 0));
  REQUIRE(comm.all_to_all(std::span<const float>(a), std::span<float>(b)));
  REQUIRE(comm.all_gather_v(std::span<const float>(a), std::span<float>(b), counts));
  REQUIRE(comm.all_to_all_v(std::span<const float>(a), counts, std::span<float>(b), counts));
  // p2p completed by sync(), by barrier(), and a send_recv pair.
  REQUIRE(comm.send(std::span<const float>(a), 0, 1));
  REQUIRE(comm.recv(std::span<float>(b), 0, 1));
  REQUIRE(comm.sync());
  REQUIRE(comm.send(std::span<const float>(a), 0, 2));
  REQUIRE(comm.recv(std::span<float>(b), 0, 2));
  REQUIRE(comm.barrier());
  REQUIRE(comm.send_recv(std::span<const float>(a), 0, std::span<float>(b), 0, 3));
  REQUIRE(comm.sync());
  // A group opened and closed, by hand and by the RAII guard.
  REQUIRE(comm.group_start());
  REQUIRE(comm.send(std::span<const float>(a), 0, 4));
  REQUIRE(comm.recv(std::span<float>(b), 0, 4));
  REQUIRE(comm.group_end());
  {
    auto g = comm.group();
    REQUIRE(comm.send(std::span<const float>(a), 0, 5));
    REQUIRE(comm.recv(std::span<float>(b), 0, 5));
  }
  REQUIRE(comm.sync());
  // An unmatched operation fails at sync(), which reports it and drops it then:
  // nothing is left for the destructor.
  REQUIRE(comm.recv(std::span<float>(b), 0, 6));
  const Status unmatched = comm.sync();
  REQUIRE_FALSE(unmatched);
  CHECK(unmatched.error().code == Errc::mismatch);
  // split: both outcomes, and the sub-communicator's own destruction.
  {
    auto in = comm.split(0, 0);
    REQUIRE(in);
    REQUIRE(in->has_value());
    REQUIRE((*in)->all_reduce(std::span<float>(a), polycoll::sum));
    auto out = comm.split(no_color, 0);
    REQUIRE(out);
    CHECK_FALSE(out->has_value());
  }
  const double ms = destroy(std::move(comm));
  WARN("NoOp destroyed after every kind of call: " << ms << " ms");
  CHECK(ms < static_cast<double>(drop_timeout.count()));
  CHECK(log.records().empty());
}

TEST_CASE("NoOp drop: moves carry pending work; the moved-from one and the owner each report only their own",
          "[noop][drop]") {
  LogCapture log;
  std::array<int, 2> a{7, 8}, b{};
  NoOp first(drop_options());
  REQUIRE(first.send(std::span<const int>(a), 0, 10));
  NoOp second(std::move(first));  // takes the pending send
  CHECK(destroy(std::move(first)) < static_cast<double>(drop_timeout.count()));
  CHECK(log.records().empty());  // the moved-from one had nothing left

  NoOp third(drop_options());
  REQUIRE(third.recv(std::span<int>(b), 0, 11));
  third = std::move(second);  // drops third's own recv (logged now), takes second's send
  auto rec = log.records();
  REQUIRE(rec.size() == 1);
  CHECK(rec[0].message.find("recv(count=2, dtype=i32, src=0, tag=11)") != std::string::npos);
  CHECK(destroy(std::move(second)) < static_cast<double>(drop_timeout.count()));
  CHECK(log.records().size() == 1);

  // The taken-over send is still pending on third; a matching recv completes it.
  std::array<int, 2> c{-1, -1};
  REQUIRE(third.recv(std::span<int>(c), 0, 10));
  REQUIRE(third.sync());
  CHECK(c == a);
  REQUIRE(third.send(std::span<const int>(a), 0, 12));
  CHECK(destroy(std::move(third)) < static_cast<double>(drop_timeout.count()));
  rec = log.records();
  REQUIRE(rec.size() == 2);
  CHECK(rec[1].message.find("send(count=2, dtype=i32, dest=0, tag=12)") != std::string::npos);
}

TEST_CASE("NoOp drop: a sub-communicator from split keeps its own pending work", "[noop][drop][split]") {
  LogCapture log;
  NoOp parent(drop_options());
  auto sub = parent.split(1, 0);
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  std::array<double, 1> x{};
  REQUIRE((*sub)->send(std::span<const double>(x), 0, 5));
  CHECK(destroy(std::move(parent)) < static_cast<double>(drop_timeout.count()));
  CHECK(log.records().empty());
  CHECK(destroy(std::move(**sub)) < static_cast<double>(drop_timeout.count()));
  const auto rec = log.records();
  REQUIRE(rec.size() == 1);
  CHECK(rec[0].message.find("send(count=1, dtype=f64, dest=0, tag=5)") != std::string::npos);
}

TEST_CASE("NoOp drop through AnyCommunicator: destroying the wrapper drops and logs the pending work",
          "[noop][drop][any]") {
  LogCapture log;
  std::array<float, 3> in{-1, -1, -1};
  {
    AnyCommunicator any{NoOp(drop_options())};
    REQUIRE(any.recv(detail::to_address(in.data()), in.size(), DType::F32, 0, 8));
    AnyCommunicator moved = std::move(any);  // the moved-from wrapper holds nothing
    const double ms = destroy(std::move(any));
    CHECK(ms < static_cast<double>(drop_timeout.count()));
    CHECK(log.records().empty());
    CHECK(destroy(std::move(moved)) < static_cast<double>(drop_timeout.count()));
  }
  CHECK(in == std::array<float, 3>{-1, -1, -1});
  const auto rec = log.records();
  REQUIRE(rec.size() == 1);
  CHECK(rec[0].message.find("recv(count=3, dtype=f32, src=0, tag=8)") != std::string::npos);
}

}  // namespace

namespace {

// A send completes at sync(): with the consistency check on, a send buffer
// changed before then is Errc::mismatch naming the send, small (copied at
// post) or large (read at sync).
TEST_CASE("NoOp check: a send buffer changed before sync() is Errc::mismatch", "[noop][check][p2p]") {
  Options o;
  o.check_consistency = true;
  NoOp comm(o);
  std::int32_t length = 100;
  std::int32_t got = 0;
  REQUIRE(comm.send(std::span<const std::int32_t>(&length, 1), 0, 3));
  length = 101;
  REQUIRE(comm.recv(std::span<std::int32_t>(&got, 1), 0, 3));
  const Status s = comm.sync();
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::mismatch);
  INFO(s.error().message);
  CHECK(s.error().message.find("send(count=1, dtype=i32, dest=0, tag=3) on rank 0 of 1 [noop]") != std::string::npos);
  CHECK(s.error().message.find("send buffer changed") != std::string::npos);
  CHECK(got == 100);  // copied at post: the receive has what was sent

  std::vector<double> big(1000, 1.0), in(1000);
  REQUIRE(comm.send(big, 0, 4));
  REQUIRE(comm.recv(in, 0, 4));
  CHECK(comm.sync());  // unchanged: no error
  REQUIRE(comm.send(big, 0, 5));
  big[999] = 2.0;
  REQUIRE(comm.recv(in, 0, 5));
  const Status t = comm.sync();
  REQUIRE_FALSE(t);
  CHECK(t.error().code == Errc::mismatch);
  CHECK(t.error().message.find("send(count=1000, dtype=f64, dest=0, tag=5)") != std::string::npos);
  CHECK(comm.sync());  // the next sync starts afresh
}

// A send whose receive is already posted is that receive's, as on Threads and
// Mpi (where the receive takes it at once): probe does not report it, so a
// probe-then-receive loop ends (it looped forever when probe reported every
// queued send).
TEST_CASE("NoOp probe skips the sends a posted receive will take", "[noop][p2p][probe]") {
  NoOp comm;
  std::int32_t a = 1, b = 2, got_a = 0, got_b = 0;
  REQUIRE(comm.send(std::span<const std::int32_t>(&a, 1), 0, 5));
  REQUIRE(comm.recv(std::span<std::int32_t>(&got_a, 1), 0, 5));
  auto p = comm.probe<std::int32_t>(0, 5);
  REQUIRE(p);
  CHECK_FALSE(p->has_value());
  REQUIRE(comm.send(std::span<const std::int32_t>(&b, 1), 0, 5));
  p = comm.probe<std::int32_t>(any_source, any_tag);
  REQUIRE(p);
  REQUIRE(p->has_value());
  CHECK((*p)->tag == 5);
  int loops = 0;
  while (true) {
    auto m = comm.probe<std::int32_t>(any_source, any_tag);
    REQUIRE(m);
    if (!m->has_value()) break;
    REQUIRE(++loops < 10);
    REQUIRE(comm.recv(std::span<std::int32_t>(&got_b, 1), (*m)->source, (*m)->tag));
  }
  CHECK(loops == 1);
  REQUIRE(comm.sync());
  CHECK(got_a == 1);
  CHECK(got_b == 2);
}

// all_reduce_value completes its own operation only, like MPI_Allreduce: a
// send posted before it stays pending for a receive posted after it.
TEST_CASE("NoOp all_reduce_value leaves earlier point-to-point work pending", "[noop][p2p]") {
  NoOp comm;
  std::int32_t a = 7, got = 0;
  REQUIRE(comm.send(std::span<const std::int32_t>(&a, 1), 0, 1));
  auto v = comm.all_reduce_value(3.5, polycoll::sum);
  REQUIRE(v);
  CHECK(*v == 3.5);
  REQUIRE(comm.recv(std::span<std::int32_t>(&got, 1), 0, 1));
  REQUIRE(comm.sync());
  CHECK(got == 7);
}

}  // namespace

// Options::reproducible on a world of one: every reduction form returns the
// rank's own data (avg divided by 1), the fold of one contribution.
TEST_CASE("NoOp reproducible: every reduction is the rank-order fold of one rank", "[noop][reproducible]") {
  Options o;
  o.reproducible = true;
  NoOp comm(o);
  CHECK(comm.options().reproducible);
  CHECK(polycoll::test::reproducible::check(comm) == "");
}

// The flight recorder on a world of one: what each form records, which calls
// it leaves out (probe, groups, calls the front end rejects), and moves.
TEST_CASE("NoOp flight record: every call that reaches the backend, oldest first; moves with the communicator",
          "[noop][flight]") {
  NoOp comm;
  CHECK(comm.flight_record().empty());
  std::array<double, 3> a{1, 2, 3}, b{};
  REQUIRE(comm.all_reduce(std::span<const double>(a), std::span<double>(b), polycoll::sum));  // out of place
  REQUIRE(comm.reduce(std::span<const double>(a), std::span<double>(b), polycoll::min, 0));
  auto g = comm.group();
  REQUIRE(comm.send(std::span<const double>(a), 0, 5));
  REQUIRE(g.end());
  REQUIRE(comm.probe<double>(0, 5));
  REQUIRE(comm.recv(std::span<double>(b), 0, 5));
  REQUIRE(comm.all_reduce_value(1.5, polycoll::max));
  CHECK_FALSE(comm.broadcast(std::span<double>(b), 1));  // root out of range: rejected, not recorded
  REQUIRE(comm.sync());
  const auto rec = comm.flight_record();
  REQUIRE(rec.size() == 6);
  const char* calls[] = {"all_reduce(count=3, dtype=f64, op=sum)", "reduce(count=3, dtype=f64, op=min, root=0)",
                         "send(count=3, dtype=f64, dest=0, tag=5)", "recv(count=3, dtype=f64, src=0, tag=5)",
                         "all_reduce(count=1, dtype=f64, op=max)", "sync()"};
  const std::uint64_t collective[] = {1, 2, 0, 0, 3, 0};
  for (std::size_t i = 0; i < rec.size(); ++i) {
    INFO(i);
    CHECK(rec[i].number == i + 1);
    CHECK(rec[i].call == calls[i]);
    CHECK(rec[i].collective == collective[i]);
    CHECK(rec[i].end.has_value());
    CHECK_FALSE(rec[i].error.has_value());
  }
  NoOp moved = std::move(comm);
  CHECK(moved.flight_record().size() == 6);
  CHECK(comm.flight_record().empty());  // NOLINT(bugprone-use-after-move): a moved-from NoOp records nothing
  REQUIRE(comm.barrier());
  CHECK(comm.flight_record().empty());
  Options off;
  off.flight_record_size = 0;
  NoOp none(off);
  REQUIRE(none.barrier());
  CHECK(none.flight_record().empty());
}

// A flight_record_size larger than the ring may be keeps FlightRecorder::max_size.
TEST_CASE("NoOp flight record: a huge flight_record_size keeps max_size calls", "[noop][flight]") {
  Options o;
  o.flight_record_size = std::numeric_limits<std::size_t>::max();
  NoOp comm(o);
  for (int i = 0; i < 3; ++i) REQUIRE(comm.barrier());
  const auto rec = comm.flight_record();
  REQUIRE(rec.size() == 3);
  CHECK(rec.back().collective == 3);
}

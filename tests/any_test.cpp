// AnyCommunicator: type erasure over NoOp and the Recorder test backend.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>
#include <polycoll/backends/threads.hpp>

#include "count_allocations.hpp"
#include "recorder.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using namespace polycoll;
using polycoll::test::Recorder;

using polycoll::test::g_allocations;

}  // namespace

namespace {

TEST_CASE("AnyCommunicator forwards the seed surface", "[any]") {
  AnyCommunicator any{Recorder(4, 2)};
  CHECK(any.backend_name() == "recorder");
  CHECK(any.world_size() == 4);
  CHECK(any.rank() == 2);
  std::array<float, 16> buf{};
  const auto a = detail::to_address(buf.data());
  CHECK(any.all_reduce(a, 4, DType::F32, ReduceOp::Avg));
  CHECK(any.broadcast(a, 4, DType::F32, 3));
  // In place (rank 2's block); any other overlap is rejected by the front end.
  CHECK(any.all_gather(a + 2 * 4 * sizeof(float), a, 4, DType::F32));
  CHECK(any.reduce_scatter(a, a + 2 * 4 * sizeof(float), 4, DType::F32, ReduceOp::Sum));
  CHECK(any.send(a, 4, DType::F32, 0, 11));
  CHECK(any.recv(a, 4, DType::F32, 1, 12));
  CHECK(any.sync());
  CHECK(any.barrier());
  Recorder* rec = any.target<Recorder>();
  REQUIRE(rec != nullptr);
  REQUIRE(rec->records.size() == 8);
  CHECK(rec->records[0].call == "all_reduce");
  CHECK(rec->records[0].op == ReduceOp::Avg);
  CHECK(rec->records[1].peer == 3);
  CHECK(rec->records[4].tag == 11);
  CHECK(rec->records[5].peer == 1);
  CHECK(any.target<NoOp>() == nullptr);
  CHECK(any.as_stream_sync() == nullptr);

  // Validation still happens in the held backend's front end.
  const Status bad = any.broadcast(a, 4, DType::F32, 4);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("[recorder]") != std::string::npos);
  CHECK(rec->records.size() == 8);
}

TEST_CASE("AnyCommunicator forwards the extra collectives and groups", "[any]") {
  AnyCommunicator any{NoOp{}};
  std::array<std::int32_t, 8> in{1, 2, 3, 4, 5, 6, 7, 8}, out{};
  const auto s = detail::to_address(in.data());
  const auto r = detail::to_address(out.data());
  auto reset = [&] { out.fill(0); };
  CHECK(any.reduce(s, r, 2, DType::I32, ReduceOp::Sum, 0));
  CHECK(out[1] == 2);
  reset();
  CHECK(any.gather(s, r, 3, DType::I32, 0));
  CHECK(out[2] == 3);
  reset();
  CHECK(any.scatter(s, r, 4, DType::I32, 0));
  CHECK(out[3] == 4);
  reset();
  CHECK(any.all_to_all(s, r, 5, DType::I32));
  CHECK(out[4] == 5);
  reset();
  const std::array<std::size_t, 1> six{6}, one{1};
  CHECK(any.all_gather_v(s, 6, r, six, one, DType::I32));  // block 0 at displacement 1
  CHECK(out[0] == 0);
  CHECK(out[6] == 6);
  reset();
  CHECK(any.all_to_all_v(s, six, {}, r, six, {}, DType::I32));
  CHECK(out[5] == 6);
  reset();
  auto g = any.group();
  CHECK(any.send_recv(s, 7, 0, r, 7, 0, DType::I32, 3));
  CHECK(g.end());
  CHECK(any.sync());
  CHECK(out[6] == 7);
  const Status unmatched = any.group_end();
  REQUIRE_FALSE(unmatched);
  CHECK(unmatched.error().message.find("group_end") != std::string::npos);

  // A backend written against the seed surface only: the newer calls are unsupported.
  AnyCommunicator seed_only{Recorder(4, 2)};
  const Status red = seed_only.reduce(s, r, 2, DType::F32, ReduceOp::Sum, 1);
  REQUIRE_FALSE(red);
  CHECK(red.error().code == Errc::unsupported);
  CHECK(red.error().message.find("reduce(count=2, dtype=f32, op=sum, root=1) on rank 2 of 4 [recorder]") !=
        std::string::npos);
  CHECK(seed_only.group_start());
  CHECK(seed_only.group_end());

  AnyCommunicator moved = std::move(any);
  const Status gone = any.all_to_all(s, r, 1, DType::I32);  // NOLINT(bugprone-use-after-move): on purpose
  REQUIRE_FALSE(gone);
  CHECK(gone.error().message.find("all_to_all on a moved-from AnyCommunicator") != std::string::npos);
}

// Generic code written against Communicator<B>: the typed surface.
template <class B>
Status typed_steps(Communicator<B>& comm, std::vector<double>& v, std::vector<double>& all, double& total) {
  const double me = static_cast<double>(comm.rank() + 1);
  std::fill(v.begin(), v.end(), me);
  if (auto s = comm.all_reduce(std::span<double>(v), polycoll::sum); !s) return s;  // op_tag
  std::vector<double> w(v.size(), me);
  if (auto s = comm.all_reduce(std::span<double>(w), ReduceOp::Max); !s) return s;  // run-time op
  v.push_back(w[0]);
  if (auto s = comm.all_gather(std::span<const double>(&me, 1), std::span<double>(all)); !s) return s;
  std::vector<double> root_sum(comm.rank() == 0 ? 1 : 0);
  if (auto s = comm.reduce(std::span<const double>(&me, 1), std::span<double>(root_sum), polycoll::sum, 0); !s)
    return s;
  total = comm.rank() == 0 ? root_sum[0] : 0.0;
  if (auto s = comm.broadcast(std::span<double>(&total, 1), 0); !s) return s;
  return comm.sync();
}

TEST_CASE("AnyCommunicator is a Communicator<AnyCommunicator>: generic typed code runs through it", "[any]") {
  STATIC_REQUIRE(std::is_base_of_v<Communicator<AnyCommunicator>, AnyCommunicator>);
  constexpr std::size_t n = 3;
  std::array<bool, n> ok{};
  const Status run = Threads::run(n, [&](Threads& t) {
    const std::size_t r = t.rank();
    AnyCommunicator any{std::move(t)};
    std::vector<double> v(4), all(n);
    double total = 0;
    const Status s = typed_steps(any, v, all, total);
    ok[r] = s && v[0] == 6.0 && v[3] == 6.0 && v[4] == 3.0 && all[0] == 1.0 && all[2] == 3.0 && total == 6.0;
  });
  REQUIRE(run);
  CHECK(ok == std::array<bool, n>{true, true, true});

  // The typed surface's own checks name the held backend; the backend's run-time answers come back unchanged.
  AnyCommunicator any{NoOp{}};
  std::array<float, 4> buf{};
  const Status bad_root = any.broadcast(std::span<float>(buf), 1);
  REQUIRE_FALSE(bad_root);
  CHECK(bad_root.error().message.find("root 1 out of range [0, 1)") != std::string::npos);
  CHECK(bad_root.error().message.find("[noop]") != std::string::npos);
  AnyCommunicator seed_only{Recorder(4, 2)};
  std::array<float, 2> send{}, recv{};
  const Status red = seed_only.reduce(std::span<const float>(send), std::span<float>(recv), polycoll::sum, 2);
  REQUIRE_FALSE(red);
  CHECK(red.error().code == Errc::unsupported);
  CHECK(seed_only.all_reduce(std::span<float>(buf), polycoll::sum));
  CHECK(seed_only.target<Recorder>()->records.back().call == "all_reduce");
}

TEST_CASE("AnyCommunicator forwards the out-of-place all_reduce and all_reduce_value", "[any]") {
  constexpr std::size_t n = 3;
  std::array<bool, n> ok{};
  const Status run = Threads::run(n, [&](Threads& t) {
    const std::size_t r = t.rank();
    AnyCommunicator any{std::move(t)};
    std::vector<long long> send{static_cast<long long>(r), 1}, recv(2);
    double d = static_cast<double>(r);
    bool good = any.all_reduce(detail::to_address(send.data()), detail::to_address(recv.data()), 2, DType::I64,
                               ReduceOp::Sum) &&
                recv[0] == 3 && recv[1] == 3;
    good = good && any.all_reduce(std::span<const long long>(send), std::span<long long>(recv), polycoll::max) &&
           recv[0] == 2 && recv[1] == 1;
    good = good && any.all_reduce_value(detail::to_address(&d), DType::F64, ReduceOp::Max) && d == 2.0;
    const auto v = any.all_reduce_value(static_cast<unsigned char>(r + 1), polycoll::prod);
    ok[r] = good && v && *v == 6;
  });
  REQUIRE(run);
  CHECK(ok == std::array<bool, n>{true, true, true});

  // The held backend's front end checks; a seed-only backend gets the copy-then-in-place fallback.
  AnyCommunicator seed_only{Recorder(4, 2)};
  std::array<float, 8> buf{};
  const auto a = detail::to_address(buf.data());
  const Status overlap = seed_only.all_reduce(a, a + 4, 4, DType::F32, ReduceOp::Sum);
  REQUIRE_FALSE(overlap);
  CHECK(overlap.error().message.find("overlap") != std::string::npos);
  CHECK(overlap.error().message.find("[recorder]") != std::string::npos);
  buf[1] = 5.0f;
  CHECK(seed_only.all_reduce(a, a + 4 * sizeof(float), 4, DType::F32, ReduceOp::Sum));
  CHECK(buf[5] == 5.0f);  // the Recorder does not reduce: recv holds send's copy
  CHECK(seed_only.target<Recorder>()->records.back().call == "all_reduce");
  AnyCommunicator empty = std::move(seed_only);
  const Status moved = seed_only.all_reduce_value(a, DType::F32, ReduceOp::Sum);  // NOLINT(bugprone-use-after-move)
  REQUIRE_FALSE(moved);
  CHECK(moved.error().message.find("all_reduce_value on a moved-from AnyCommunicator") != std::string::npos);
}

TEST_CASE("AnyCommunicator: no allocation per call", "[any]") {
  AnyCommunicator any{NoOp{}};
  std::array<double, 8> buf{};
  const auto a = detail::to_address(buf.data());
  const std::size_t before = g_allocations;
  for (int i = 0; i < 1000; ++i) {
    (void)any.all_reduce(a, 8, DType::F64, ReduceOp::Sum);
    (void)any.broadcast(a, 8, DType::F64, 0);
    (void)any.all_gather(a, a, 8, DType::F64);
  }
  CHECK(g_allocations == before);
}

TEST_CASE("AnyCommunicator: split gives AnyCommunicators of the same backend", "[any]") {
  AnyCommunicator any{NoOp{}};
  auto sub = any.split(3, 0);
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  CHECK((*sub)->backend_name() == "noop");
  CHECK((*sub)->target<NoOp>() != nullptr);
  auto none = any.split(no_color, 0);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
}

TEST_CASE("AnyCommunicator: moved-from is safe", "[any]") {
  AnyCommunicator a{NoOp{}};
  AnyCommunicator b = std::move(a);
  CHECK(b.has_value());
  CHECK_FALSE(a.has_value());  // NOLINT(bugprone-use-after-move): testing it on purpose
  const Status s = a.sync();   // NOLINT(bugprone-use-after-move)
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::invalid_argument);
  CHECK(a.world_size() == 0);
  CHECK(a.target<NoOp>() == nullptr);
  a = std::move(b);
  CHECK(a.has_value());
  CHECK(a.target<NoOp>() != nullptr);
}

}  // namespace

namespace {

TEST_CASE("AnyCommunicator forwards probe and wildcard receives; a backend without probe says unsupported",
          "[any][probe]") {
  AnyCommunicator any{NoOp()};
  std::array<std::int32_t, 3> out{1, 2, 3}, in{};
  REQUIRE(any.send(out, 0, 8));
  auto p = any.probe(any_source, any_tag, DType::I32);
  REQUIRE(p);
  REQUIRE(p->has_value());
  CHECK((*p)->source == 0);
  CHECK((*p)->tag == 8);
  CHECK((*p)->count == 3);
  auto typed = any.probe<std::int16_t>(0, 8);  // the typed surface, through the table
  REQUIRE(typed);
  REQUIRE(typed->has_value());
  CHECK((*typed)->count == 6);
  CHECK(any.recv(in, any_source, any_tag));
  CHECK(any.sync());
  CHECK(in == out);
  auto none = any.probe(0, 8, DType::I32);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  // Recorder declares no probe (supports_probe false): Errc::unsupported at
  // run time through AnyCommunicator (the typed probe<T> on Recorder itself
  // is a compile-time error: tests/compile_fail/probe_unsupported.cpp).
  AnyCommunicator rec{Recorder(4, 2)};
  auto q = rec.probe(0, 1, DType::F32);
  REQUIRE_FALSE(q);
  CHECK(q.error().code == Errc::unsupported);
  CHECK(q.error().message.find("probe(dtype=f32, src=0, tag=1) on rank 2 of 4 [recorder]") != std::string::npos);
  auto qt = rec.probe<float>(0, 1);
  REQUIRE_FALSE(qt);
  CHECK(qt.error().code == Errc::unsupported);
  const Status a = rec.recv(in, any_source, 1);
  REQUIRE_FALSE(a);
  CHECK(a.error().code == Errc::unsupported);
  CHECK(a.error().message.find("src=any_source") != std::string::npos);
  CHECK(rec.target<Recorder>()->records.empty());

  AnyCommunicator moved = std::move(any);
  auto m = any.probe(0, 1, DType::F32);  // NOLINT(bugprone-use-after-move): the moved-from contract
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::invalid_argument);
}

}  // namespace

TEST_CASE("AnyCommunicator: the held backend records each call once; flight_record forwards", "[any][flight]") {
  AnyCommunicator any{NoOp{}};
  std::array<float, 4> buf{1, 2, 3, 4};
  REQUIRE(any.all_reduce(detail::to_address(buf.data()), 4, DType::F32, ReduceOp::Max));  // seed surface
  REQUIRE(any.broadcast(std::span<float>(buf), 0));                                        // typed surface
  REQUIRE(any.barrier());
  const auto rec = any.flight_record();
  REQUIRE(rec.size() == 3);
  CHECK(rec[0].number == 1);
  CHECK(rec[0].call == "all_reduce(count=4, dtype=f32, op=max)");
  CHECK(rec[1].call == "broadcast(count=4, dtype=f32, root=0)");
  CHECK(rec[2].call == "barrier()");
  CHECK(rec[2].collective == 3);
  CHECK(any.target<NoOp>()->flight_record().size() == 3);
  // Generic code over Communicator<B>& reads the same record.
  const auto through = [](const auto& comm) { return comm.flight_record().size(); };
  CHECK(through(static_cast<const Communicator<AnyCommunicator>&>(any)) == 3);
  AnyCommunicator moved = std::move(any);
  CHECK(any.flight_record().empty());  // NOLINT(bugprone-use-after-move): moved-from is specified
  CHECK(moved.flight_record().size() == 3);
}

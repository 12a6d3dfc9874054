// AnyCommunicator: type erasure over NoOp and the Recorder test backend.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>

#include "count_allocations.hpp"
#include "recorder.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>

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

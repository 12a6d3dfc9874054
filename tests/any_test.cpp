// AnyCommunicator: type erasure over NoOp and the Recorder test backend.
#include <catch2/catch.hpp>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>

#include "count_allocations.hpp"
#include "recorder.hpp"

#include <array>
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
  CHECK(any.all_gather(a, a, 4, DType::F32));
  CHECK(any.reduce_scatter(a, a, 4, DType::F32, ReduceOp::Sum));
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

// Communicator<B>: validation happens once, before any backend code; run-time
// DType/ReduceOp reach the backend as the right tags; capability traits gate
// both surfaces.
#include <catch2/catch.hpp>

#include "recorder.hpp"

#include <array>
#include <complex>
#include <limits>
#include <vector>

namespace {

using namespace polycoll;
using polycoll::test::Recorder;

void require_error(const Status& s, Errc code, const std::string& needle) {
  REQUIRE_FALSE(s);
  CHECK(s.error().code == code);
  INFO(s.error().message);
  CHECK(s.error().message.find(needle) != std::string::npos);
}

TEST_CASE("run-time dtype and op reach the backend as tags", "[frontend]") {
  Recorder comm(4, 1);
  std::array<float, 8> buf{};
  const auto a = detail::to_address(buf.data());
  for (DType d : all_dtypes) {
    for (ReduceOp op : all_reduce_ops) {
      INFO(name(d) << " " << name(op));
      comm.records.clear();
      const Status s = comm.all_reduce(a, 2, d, op);
      if (!is_valid(d, op)) {
        require_error(s, Errc::invalid_argument, "is not defined for dtype");
        CHECK(comm.records.empty());
      } else if (d == DType::F16) {
        require_error(s, Errc::unsupported, "does not support");
        CHECK(comm.records.empty());
      } else {
        REQUIRE(s);
        REQUIRE(comm.records.size() == 1);
        CHECK(comm.records[0].dtype == d);
        CHECK(comm.records[0].op == op);
        CHECK(comm.records[0].a == a);
        CHECK(comm.records[0].count == 2);
      }
    }
  }
}

TEST_CASE("each bad argument is rejected before the backend runs", "[frontend][errors]") {
  Recorder comm(4, 3);
  std::array<double, 16> buf{};
  const auto a = detail::to_address(buf.data());
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;

  require_error(comm.all_reduce(0, 1, DType::F32, ReduceOp::Sum), Errc::invalid_argument,
                "all_reduce(count=1, dtype=f32, op=sum) on rank 3 of 4 [recorder]: buffer is null with count > 0");
  require_error(comm.all_reduce(a, huge, DType::F64, ReduceOp::Sum), Errc::invalid_argument, "size overflows");
  require_error(comm.broadcast(a, 4, DType::I32, 4), Errc::invalid_argument,
                "broadcast(count=4, dtype=i32, root=4) on rank 3 of 4 [recorder]: root 4 out of range [0, 4)");
  require_error(comm.broadcast(0, 4, DType::I32, 0), Errc::invalid_argument, "null");
  require_error(comm.all_gather(a, a, huge, DType::U8), Errc::invalid_argument, "recv buffer size overflows");
  require_error(comm.all_gather(0, a, 3, DType::U8), Errc::invalid_argument, "send buffer is null");
  require_error(comm.all_gather(a, 0, 3, DType::U8), Errc::invalid_argument, "recv buffer is null");
  require_error(comm.reduce_scatter(a, a, huge, DType::U8, ReduceOp::Max), Errc::invalid_argument,
                "send buffer size overflows");
  // recv is rank 3's block of send (in place), so only the op is wrong.
  require_error(comm.reduce_scatter(a, a + 3 * 2 * 16, 2, DType::C128, ReduceOp::Max), Errc::invalid_argument,
                "op max is not defined for dtype c128");
  // Aliasing: only the exact in-place block; rank 3's neighbour block or a shifted one is rejected.
  require_error(comm.reduce_scatter(a, a + 2 * 2 * 16, 2, DType::C128, ReduceOp::Sum), Errc::invalid_argument,
                "reduce_scatter(count=2, dtype=c128, op=sum) on rank 3 of 4 [recorder]: recv buffer and send buffer "
                "overlap (other than in the documented in-place form)");
  require_error(comm.all_gather(a + 8, a, 2, DType::F64), Errc::invalid_argument,
                "all_gather(count=2, dtype=f64) on rank 3 of 4 [recorder]: send buffer and recv buffer overlap");
  require_error(comm.send(a, 1, DType::F32, 9, 5), Errc::invalid_argument,
                "send(count=1, dtype=f32, dest=9, tag=5) on rank 3 of 4 [recorder]: dest 9 out of range");
  require_error(comm.recv(a, 1, DType::F32, 4, 5), Errc::invalid_argument,
                "recv(count=1, dtype=f32, src=4, tag=5) on rank 3 of 4 [recorder]: src 4 out of range");
  require_error(comm.send(a, 1, DType::I16, 0, 0), Errc::unsupported, "cannot move this dtype");
  require_error(comm.broadcast(a, 1, static_cast<DType>(200), 0), Errc::invalid_argument,
                "dtype=<invalid 200>, root=0) on rank 3 of 4 [recorder]: unknown DType value <invalid 200>");
  require_error(comm.all_reduce(a, 1, DType::F32, static_cast<ReduceOp>(17)), Errc::invalid_argument,
                "unknown ReduceOp value <invalid 17>");
  CHECK(comm.records.empty());

  // Zero counts with null addresses are fine, as in MPI and NCCL.
  CHECK(comm.all_reduce(0, 0, DType::F32, ReduceOp::Sum));
  CHECK(comm.all_gather(0, 0, 0, DType::F32));
  CHECK(comm.records.size() == 2);
  // The in-place forms reach the backend.
  CHECK(comm.all_gather(a + 3 * 2 * 8, a, 2, DType::F64));
  CHECK(comm.reduce_scatter(a, a + 3 * 2 * 8, 2, DType::F64, ReduceOp::Sum));
  CHECK(comm.records.size() == 4);
}

TEST_CASE("typed surface: op tags, spans and ranges", "[frontend][typed]") {
  Recorder comm(2, 0);
  std::vector<std::int16_t> v16(6);
  std::vector<bf16> vb(6);
  std::vector<std::complex<float>> vc(4), vc_out(2);
  std::array<std::uint8_t, 3> small{};

  REQUIRE(comm.all_reduce(std::span<bf16>(vb), polycoll::max));
  REQUIRE(comm.all_reduce(v16, polycoll::prod));  // a vector lvalue is a range
  REQUIRE(comm.reduce_scatter(vc, vc_out, polycoll::avg));
  std::array<std::uint8_t, 5> wrong{};
  require_error(comm.all_gather(std::span<const std::uint8_t>(small), std::span<std::uint8_t>(wrong)),
                Errc::invalid_argument, "recv.size() is 5, expected send.size() x world_size = 3 x 2");
  REQUIRE(comm.records.size() == 3);
  CHECK(comm.records[0].dtype == DType::BF16);
  CHECK(comm.records[0].op == ReduceOp::Max);
  CHECK(comm.records[1].dtype == DType::I16);
  CHECK(comm.records[2].dtype == DType::C64);
  CHECK(comm.records[2].op == ReduceOp::Avg);
  CHECK(comm.records[2].count == 2);

  // Run-time op on a typed span is checked at run time.
  require_error(comm.all_reduce(vc, ReduceOp::Min), Errc::invalid_argument, "op min is not defined for dtype c64");
  std::vector<f16> vh(2);
  require_error(comm.all_reduce(vh, ReduceOp::Sum), Errc::unsupported, "does not support");

  std::vector<float> rs_in(5), rs_out(2);
  require_error(comm.reduce_scatter(rs_in, rs_out, polycoll::sum), Errc::invalid_argument,
                "send.size() is 5, expected recv.size() x world_size = 2 x 2");
  std::span<float> null_span(static_cast<float*>(nullptr), 3);
  require_error(comm.all_reduce(null_span, polycoll::sum), Errc::invalid_argument, "null");
}

TEST_CASE("split and sync reach the backend", "[frontend]") {
  Recorder comm(3, 2);
  auto part = comm.split(no_color, 0);
  REQUIRE(part);
  CHECK_FALSE(part->has_value());
  auto sub = comm.split(1, 0);
  REQUIRE(sub);
  REQUIRE(sub->has_value());
  CHECK((*sub)->world_size() == 1);
  CHECK(comm.sync());
  CHECK(comm.barrier());
  CHECK(comm.as_stream_sync() == nullptr);
  CHECK(Recorder::backend_name == "recorder");
}

}  // namespace

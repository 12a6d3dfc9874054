// Nccl-specific behaviour: the dtype rewrites, bad input, the typed surface on
// device spans, StreamSyncOps ordering, timeouts, the drop contract, split
// with any uint32 colors, from_unique_id, AnyCommunicator. Every test runs on
// 1 .. all visible GPUs unchanged.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <complex>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <polycoll/any_communicator.hpp>

#include "fixture.hpp"

namespace polycoll::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::size_t ngpus() { return static_cast<std::size_t>(std::min(gpu_count(), 8)); }

void require_all(const std::vector<Report>& reports) {
  REQUIRE_FALSE(reports.empty());
  for (const auto& rep : reports) {
    INFO("rank " << rep.rank << " of " << rep.world << " [nccl], " << rep.failures.size() << " failure(s) in "
                 << rep.checks << " checks");
    for (const auto& f : rep.failures) UNSCOPED_INFO(f);
    CHECK(rep.failures.empty());
  }
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

void expect_error(Report& rep, const Status& s, Errc code, const std::string& needle, const std::string& what) {
  rep.expect(!s, what + " must fail");
  if (s) return;
  rep.expect(s.error().code == code, what + ": code " + std::string(to_string(s.error().code)) + ", expected " +
                                         std::string(to_string(code)) + ": " + s.error().message);
  rep.expect(contains(s.error().message, needle), what + ": message lacks '" + needle + "': " + s.error().message);
  rep.expect(contains(s.error().message, "[nccl]"), what + ": message lacks the backend: " + s.error().message);
}

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("dtype table: the static rewrites and the capability traits", "[nccl][traits]") {
  using namespace detail::nccl;
  STATIC_REQUIRE(type_map<DType::C64>::type == ncclFloat32);
  STATIC_REQUIRE(type_map<DType::C64>::scale == 2);
  STATIC_REQUIRE(type_map<DType::C128>::type == ncclFloat64);
  STATIC_REQUIRE(type_map<DType::Bool>::type == ncclUint8);
  STATIC_REQUIRE(type_map<DType::I16>::type == ncclUint8);
  STATIC_REQUIRE(type_map<DType::I16>::scale == 2);
  STATIC_REQUIRE(type_map<DType::BF16>::type == ncclBfloat16);
  STATIC_REQUIRE(type_map<DType::F8E4M3>::type == ncclFloat8e4m3);
  STATIC_REQUIRE(type_map<DType::F8E5M2>::type == ncclFloat8e5m2);
  STATIC_REQUIRE(red_op<DType::Bool, ReduceOp::Sum>() == ncclMax);
  STATIC_REQUIRE(red_op<DType::Bool, ReduceOp::Max>() == ncclMax);
  STATIC_REQUIRE(red_op<DType::Bool, ReduceOp::Prod>() == ncclMin);
  STATIC_REQUIRE(red_op<DType::Bool, ReduceOp::Min>() == ncclMin);
  STATIC_REQUIRE(red_op<DType::F32, ReduceOp::Avg>() == ncclAvg);
  STATIC_REQUIRE(red_op<DType::C64, ReduceOp::Avg>() == ncclAvg);
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::I16, ReduceOp::Sum>);
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::U16, ReduceOp::Max>);
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::C64, ReduceOp::Prod>);
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::I32, ReduceOp::Avg>);
  STATIC_REQUIRE(supports_reduction_v<Nccl, DType::C128, ReduceOp::Sum>);
  STATIC_REQUIRE(supports_reduction_v<Nccl, DType::Bool, ReduceOp::Prod>);
  // NCCL refuses ncclAvg on fp8 (ncclInvalidArgument, seen on an H200 with NCCL 2.28); the other ops run.
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::F8E5M2, ReduceOp::Avg>);
  STATIC_REQUIRE_FALSE(supports_reduction_v<Nccl, DType::F8E4M3, ReduceOp::Avg>);
  STATIC_REQUIRE(supports_reduction_v<Nccl, DType::F8E4M3, ReduceOp::Sum>);
  STATIC_REQUIRE(supports_reduction_v<Nccl, DType::F8E5M2, ReduceOp::Prod>);
  STATIC_REQUIRE(supports_reduction_v<Nccl, DType::F8E5M2, ReduceOp::Max>);
  STATIC_REQUIRE(supports_dtype_v<Nccl, DType::I16>);
  STATIC_REQUIRE(supports_dtype_v<Nccl, DType::C128>);
}

TEST_CASE("bad input: unsupported reductions, host memory, wrong device, null", "[nccl][errors]") {
  std::vector<std::size_t> worlds{1};
  if (ngpus() > 1) worlds.push_back(ngpus());
  for (std::size_t w : worlds) {
    INFO("world " << w);
    require_all(run_fresh(w, {}, [](Nccl& comm, Report& rep) {
      DeviceBuffer<std::int16_t> shorts(4 * comm.world_size());
      expect_error(rep, comm.all_reduce(shorts.address(), 4, DType::I16, ReduceOp::Sum), Errc::unsupported,
                   "all_reduce(count=4, dtype=i16, op=sum)", "i16 all_reduce");
      DeviceBuffer<std::uint16_t> ushorts(4 * comm.world_size());
      expect_error(rep, comm.reduce_scatter(ushorts.address(), ushorts.address(), 4, DType::U16, ReduceOp::Max),
                   Errc::unsupported, "reduce_scatter(count=4, dtype=u16, op=max)", "u16 reduce_scatter");
      DeviceBuffer<std::complex<float>> cplx(4);
      expect_error(rep, comm.all_reduce(cplx.address(), 4, DType::C64, ReduceOp::Prod), Errc::unsupported,
                   "op=prod", "c64 prod");
      // fp8 avg is refused before NCCL (which would put the communicator in error).
      DeviceBuffer<std::uint8_t> bytes(4);
      expect_error(rep, comm.all_reduce(bytes.address(), 4, DType::F8E4M3, ReduceOp::Avg), Errc::unsupported,
                   "all_reduce(count=4, dtype=f8e4m3, op=avg)", "f8e4m3 avg");
      expect_error(rep, comm.all_reduce(bytes.address(), 4, DType::F8E5M2, ReduceOp::Avg), Errc::unsupported,
                   "op=avg", "f8e5m2 avg");
      // Moving i16 is fine (bytes).
      rep.expect_ok(comm.broadcast(shorts.address(), 4, DType::I16, 0), "i16 broadcast");

      std::vector<float> host(4, 1.0f);
      expect_error(rep, comm.all_reduce(detail::to_address(host.data()), 4, DType::F32, ReduceOp::Sum),
                   Errc::invalid_argument, "host memory", "pageable host buffer");
      expect_error(rep, comm.send(detail::to_address(host.data()), 4, DType::F32, 0, 0), Errc::invalid_argument,
                   "host memory", "pageable host send");
      expect_error(rep, comm.all_reduce(0, 4, DType::F32, ReduceOp::Sum), Errc::invalid_argument, "null",
                   "null buffer");
      if (gpu_count() >= 2) {
        const int other = (comm.device() + 1) % gpu_count();
        (void)cudaSetDevice(other);
        DeviceBuffer<float> elsewhere(4);
        (void)cudaSetDevice(comm.device());
        expect_error(rep, comm.all_reduce(elsewhere.address(), 4, DType::F32, ReduceOp::Sum), Errc::invalid_argument,
                     "memory of device " + std::to_string(other), "buffer on another device");
      }
      StreamSyncOps* ops = comm.as_stream_sync();
      rep.expect(ops != nullptr, "as_stream_sync");
      if (ops) expect_error(rep, ops->destroy_event(0), Errc::invalid_argument, "null event", "destroy_event(0)");
      // Errors before NCCL leave the communicator usable.
      DeviceBuffer<float> good(8);
      rep.expect_ok(comm.all_reduce(good.address(), 8, DType::F32, ReduceOp::Sum), "all_reduce after errors");
      rep.expect_ok(comm.barrier(), "barrier after errors");
      int now = -1;
      (void)cudaGetDevice(&now);
      rep.expect(now == comm.device(), "the caller's device is restored");
    }));
  }
}

TEST_CASE("typed surface on device spans", "[nccl][typed]") {
  require_all(run_fresh(ngpus(), {}, [](Nccl& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    DeviceBuffer<float> v(33);
    Array<float> init(33);
    for (auto& x : init) x = static_cast<float>(r + 1);
    v.write(init);
    rep.expect_ok(comm.all_reduce(std::span<float>(v.data(), 33), polycoll::sum), "typed sum");
    DeviceBuffer<bool> any_of(16), all_of(16);
    Array<bool> flags(16);
    for (std::size_t i = 0; i < 16; ++i) flags[i] = (i % w) == r;
    any_of.write(flags);
    all_of.write(flags);
    rep.expect_ok(comm.all_reduce(std::span<bool>(any_of.data(), 16), polycoll::max), "bool max (or)");
    rep.expect_ok(comm.all_reduce(std::span<bool>(all_of.data(), 16), polycoll::prod), "bool prod (and)");
    DeviceBuffer<std::complex<double>> rs_in(2 * w), rs_out(2);
    Array<std::complex<double>> ones(2 * w);
    for (auto& x : ones) x = {1.0, 2.0};
    rs_in.write(ones);
    rep.expect_ok(comm.reduce_scatter(std::span<const std::complex<double>>(rs_in.data(), 2 * w),
                                      std::span<std::complex<double>>(rs_out.data(), 2), polycoll::avg),
                  "typed reduce_scatter avg c128");
    DeviceBuffer<std::int16_t> mine(3), all(3 * w);
    Array<std::int16_t> m(3);
    for (auto& x : m) x = static_cast<std::int16_t>(-1000 - static_cast<int>(r));
    mine.write(m);
    rep.expect_ok(comm.all_gather(std::span<const std::int16_t>(mine.data(), 3), std::span<std::int16_t>(all.data(), 3 * w)),
                  "typed all_gather i16 (bytes)");
    DeviceBuffer<f16> out(4), in(4);
    Array<f16> o(4);
    for (auto& x : o) x = f16(static_cast<float>(r) + 0.5f);
    out.write(o);
    rep.expect_ok(comm.send(std::span<const f16>(out.data(), 4), (r + 1) % w, 9), "typed send");
    rep.expect_ok(comm.recv(std::span<f16>(in.data(), 4), (r + w - 1) % w, 9), "typed recv");
    rep.expect_ok(comm.sync(), "sync");
    rep.expect(v.read()[32] == static_cast<float>(w * (w + 1) / 2), "typed sum value");
    bool all_true = true, and_ok = true;
    const Array<bool> a = any_of.read(), b = all_of.read();
    for (std::size_t i = 0; i < 16; ++i) {
      all_true = all_true && a[i];
      and_ok = and_ok && (b[i] == (w == 1));
    }
    rep.expect(all_true, "bool max is logical or");
    rep.expect(and_ok, "bool prod is logical and");
    rep.expect(rs_out.read()[1] == std::complex<double>(1.0, 2.0), "c128 avg value");
    rep.expect(all.read()[3 * (w - 1)] == static_cast<std::int16_t>(-1000 - static_cast<int>(w - 1)),
               "i16 all_gather value");
    rep.expect(static_cast<float>(in.read()[3]) == static_cast<float>((r + w - 1) % w) + 0.5f, "typed recv value");
  }));
}

TEST_CASE("StreamSyncOps: communication waits for user-stream work, and the user stream for communication",
          "[nccl][stream]") {
  require_all(run_fresh(ngpus(), {}, [](Nccl& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const std::size_t n = 1u << 16;
    StreamSyncOps* ops = comm.as_stream_sync();
    rep.expect(ops != nullptr, "as_stream_sync");
    if (!ops) return;
    cudaStream_t user = nullptr;
    rep.expect(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking) == cudaSuccess, "user stream");
    const auto user_h = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user));
    DeviceBuffer<std::uint8_t> send(n), recv(n * w), copy(n * w);
    auto ev1 = ops->create_event();
    auto ev2 = ops->create_event();
    rep.expect(ev1.has_value() && ev2.has_value(), "create_event");
    if (!ev1 || !ev2) return;

    // user stream: [gate] memset(send, 1 + r) -> ev1; comm: wait ev1, all_gather -> ev2; user: wait ev2, copy.
    Gate gate;
    rep.expect(gate.block(user) == cudaSuccess, "gate");
    rep.expect(cudaMemsetAsync(send.data(), static_cast<int>(1 + r), n, user) == cudaSuccess, "memset on user stream");
    rep.expect_ok(ops->record_on_stream(*ev1, user_h), "record_on_stream");
    rep.expect_ok(ops->comm_stream_wait_event(*ev1), "comm_stream_wait_event");
    rep.expect_ok(comm.all_gather(send.address(), recv.address(), n, DType::U8), "all_gather behind the event");
    rep.expect_ok(ops->record_on_comm_stream(*ev2), "record_on_comm_stream");
    rep.expect_ok(ops->stream_wait_event(user_h, *ev2), "stream_wait_event");
    rep.expect(cudaMemcpyAsync(copy.data(), recv.data(), n * w, cudaMemcpyDeviceToDevice, user) == cudaSuccess,
               "copy on user stream");
    std::this_thread::sleep_for(50ms);
    // Still gated: nothing behind the gate may have run.
    const Array<std::uint8_t> early = recv.read();
    rep.expect(early[0] == 0 && early[n * w - 1] == 0, "the all_gather ran before the user stream's memset");
    gate.open();
    rep.expect(cudaStreamSynchronize(user) == cudaSuccess, "user stream sync");
    const Array<std::uint8_t> got = copy.read();
    bool ok = true;
    for (std::size_t q = 0; q < w && ok; ++q) ok = got[q * n] == 1 + q && got[q * n + n - 1] == 1 + q;
    rep.expect(ok, "user stream saw the all_gather of the memset values");
    rep.expect_ok(comm.sync(), "sync");

    // record_on_comm_stream launches queued send/recv: no sync() needed before the user stream reads.
    DeviceBuffer<std::uint32_t> out(1024), in(1024);
    rep.expect(cudaMemsetAsync(out.data(), static_cast<int>(r + 1), 1024 * 4, user) == cudaSuccess, "memset out");
    rep.expect_ok(ops->record_on_stream(*ev1, user_h), "record out");
    rep.expect_ok(ops->comm_stream_wait_event(*ev1), "comm waits for out");
    rep.expect_ok(comm.send(out.address(), 1024, DType::U32, (r + 1) % w, 0), "send");
    rep.expect_ok(comm.recv(in.address(), 1024, DType::U32, (r + w - 1) % w, 0), "recv");
    rep.expect_ok(ops->record_on_comm_stream(*ev2), "record after p2p");
    rep.expect_ok(ops->stream_wait_event(user_h, *ev2), "user waits for p2p");
    DeviceBuffer<std::uint32_t> seen(1024);
    rep.expect(cudaMemcpyAsync(seen.data(), in.data(), 1024 * 4, cudaMemcpyDeviceToDevice, user) == cudaSuccess,
               "copy in");
    rep.expect(cudaStreamSynchronize(user) == cudaSuccess, "user sync");
    const std::uint8_t b = static_cast<std::uint8_t>((r + w - 1) % w + 1);
    const std::uint32_t want = 0x01010101u * b;
    rep.expect(seen.read()[1023] == want, "user stream saw the received data");
    rep.expect_ok(ops->sync_comm_stream(), "sync_comm_stream");
    rep.expect_ok(ops->destroy_event(*ev1), "destroy ev1");
    rep.expect_ok(ops->destroy_event(*ev2), "destroy ev2");
    (void)cudaStreamDestroy(user);
  }));
}

TEST_CASE("timeout: a stuck stream aborts the communicator and names the pending call", "[nccl][timeout]") {
  Options o;
  o.op_timeout = 300ms;
  const auto t_all = Clock::now();
  require_all(run_fresh(ngpus(), o, [](Nccl& comm, Report& rep) {
    DeviceBuffer<float> buf(1024);
    // Once with the stream free, so that NCCL's lazy connection setup is done.
    rep.expect_ok(comm.all_reduce(buf.address(), 1024, DType::F32, ReduceOp::Sum), "warm-up");
    rep.expect_ok(comm.sync(), "warm-up sync");
    StreamSyncOps* ops = comm.as_stream_sync();
    cudaStream_t user = nullptr;
    (void)cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking);
    Gate gate;
    gate.open_after(1500ms);  // ncclCommAbort may wait for NCCL's streams, which wait for ours
    rep.expect(gate.block(user) == cudaSuccess, "gate");
    auto ev = ops->create_event();
    rep.expect(ev.has_value(), "create_event");
    if (!ev) return;
    rep.expect_ok(ops->record_on_stream(*ev, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user))),
                  "record");
    rep.expect_ok(ops->comm_stream_wait_event(*ev), "comm waits for the gate");
    rep.expect_ok(comm.all_reduce(buf.address(), 1024, DType::F32, ReduceOp::Sum), "submit");
    rep.expect(comm.pending() >= 1, "pending() counts the submitted call");
    const auto t0 = Clock::now();
    const Status s = comm.sync();
    const auto waited = ms_since(t0);
    expect_error(rep, s, Errc::timeout, "all_reduce(count=1024, dtype=f32, op=sum)", "sync past op_timeout");
    if (!s) rep.expect(contains(s.error().message, "timed out after 300 ms"), "names the timeout: " + s.error().message);
    rep.expect(waited >= 290, "returned before the timeout: " + std::to_string(waited) + " ms");
    expect_error(rep, comm.all_reduce(buf.address(), 1024, DType::F32, ReduceOp::Sum), Errc::aborted, "aborted",
                 "call after the abort");
    expect_error(rep, comm.sync(), Errc::aborted, "aborted", "sync after the abort");
    rep.expect(comm.native() == nullptr, "native() is null after the abort");
    (void)ops->destroy_event(*ev);
    gate.open();
    (void)cudaStreamSynchronize(user);
    (void)cudaStreamDestroy(user);
  }));
  CHECK(ms_since(t_all) < 60000);

  // A peer that never joins: rank 0 times out; the others never call.
  if (ngpus() >= 2) {
    require_all(run_fresh(ngpus(), o, [](Nccl& comm, Report& rep) {
      DeviceBuffer<float> buf(256);
      // Everyone once, so that NCCL's connections exist; then rank 0 alone.
      rep.expect_ok(comm.all_reduce(buf.address(), 256, DType::F32, ReduceOp::Max), "warm-up");
      rep.expect_ok(comm.sync(), "warm-up sync");
      if (comm.rank() != 0) return;
      Status s = comm.all_reduce(buf.address(), 256, DType::F32, ReduceOp::Max);
      if (s) s = comm.sync();  // a launch NCCL keeps in progress may time out itself: either names the call
      expect_error(rep, s, Errc::timeout, "all_reduce(count=256, dtype=f32, op=max)", "missing peer");
    }));
  }
}

TEST_CASE("drop contract: clean teardown is quick and silent, pending work is bounded and logged", "[nccl][drop]") {
  {
    LogCapture logs;
    auto comms = Nccl::init_all(first_devices(ngpus()));
    REQUIRE(comms);
    std::function<void(Nccl&, Report&)> body = [](Nccl& comm, Report& rep) {
      DeviceBuffer<double> buf(1000);
      rep.expect_ok(comm.all_reduce(buf.address(), 1000, DType::F64, ReduceOp::Sum), "all_reduce");
      rep.expect_ok(comm.sync(), "sync");
    };
    require_all(run_on(*comms, body));
    const auto t0 = Clock::now();
    comms->clear();  // one thread destroys every rank in turn: finalize must not wait for the others
    const auto took = ms_since(t0);
    INFO("teardown took " << took << " ms");
    CHECK(took < 4000);  // below drop_timeout (5 s): finalize completed, nothing was aborted
    const auto lines = logs.take();
    for (const auto& l : lines) UNSCOPED_INFO(l);
    CHECK(lines.empty());
  }
  {
    LogCapture logs;
    Options o;
    o.drop_timeout = 200ms;
    auto comms = Nccl::init_all(first_devices(ngpus()), o);
    REQUIRE(comms);
    std::vector<long long> took(comms->size(), 0);
    std::function<void(Nccl&, Report&)> body = [&](Nccl& comm, Report& rep) {
      DeviceBuffer<float> buf(4096);
      rep.expect_ok(comm.all_reduce(buf.address(), 4096, DType::F32, ReduceOp::Sum), "warm-up");
      rep.expect_ok(comm.sync(), "warm-up sync");
      cudaStream_t user = nullptr;
      (void)cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking);
      Gate gate;
      gate.open_after(1500ms);
      (void)gate.block(user);
      StreamSyncOps* ops = comm.as_stream_sync();
      auto ev = ops->create_event();
      rep.expect(ev.has_value(), "create_event");
      if (!ev) return;
      rep.expect_ok(ops->record_on_stream(*ev, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user))),
                    "record");
      rep.expect_ok(ops->comm_stream_wait_event(*ev), "wait");
      rep.expect_ok(comm.all_reduce(buf.address(), 4096, DType::F32, ReduceOp::Sum), "submit");
      (void)ops->destroy_event(*ev);
      const auto t0 = Clock::now();
      { Nccl dying = std::move(comm); }  // never synced: the destructor must not hang
      took[rep.rank] = ms_since(t0);
      rep.expect(comm.native() == nullptr && comm.as_stream_sync() == nullptr, "moved-from is empty");
      expect_error(rep, comm.all_reduce(buf.address(), 4096, DType::F32, ReduceOp::Sum), Errc::invalid_argument,
                   "moved-from", "moved-from call");
      gate.open();
      (void)cudaStreamSynchronize(user);
      (void)cudaStreamDestroy(user);
    };
    require_all(run_on(*comms, body));
    for (auto t : took) CHECK(t < 10000);
    const auto lines = logs.take();
    bool named = false;
    for (const auto& l : lines) {
      UNSCOPED_INFO(l);
      named = named || (contains(l, "all_reduce(count=4096, dtype=f32, op=sum)") && contains(l, "drop_timeout"));
    }
    CHECK(named);
  }
}

TEST_CASE("split: any uint32 colors and keys, no_color", "[nccl][split]") {
  require_all(run_fresh(ngpus(), {}, [](Nccl& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    // Colors and keys above INT_MAX: NCCL's int arguments cannot take them as they are.
    auto sub = comm.split(0xFFFFFFF0u + static_cast<std::uint32_t>(r % 2), 0xF0000000u - static_cast<std::uint32_t>(r));
    rep.expect(sub.has_value() && sub->has_value(), "split with large colors");
    if (!sub || !sub->has_value()) return;
    Nccl& s = **sub;
    rep.expect(s.world_size() == (w - r % 2 + 1) / 2, "sub world size");
    rep.expect(s.rank() == (w - 1 - r) / 2, "sub rank follows the keys (descending)");
    rep.expect(s.device() == comm.device(), "same device");
    DeviceBuffer<std::int64_t> one(1);
    Array<std::int64_t> v(1);
    v[0] = static_cast<std::int64_t>(r);
    one.write(v);
    rep.expect_ok(s.all_reduce(one.address(), 1, DType::I64, ReduceOp::Sum), "sub all_reduce");
    rep.expect_ok(s.sync(), "sub sync");
    std::int64_t want = 0;
    for (std::size_t q = r % 2; q < w; q += 2) want += static_cast<std::int64_t>(q);
    rep.expect(one.read()[0] == want, "sub all_reduce value");
    auto none = comm.split(no_color, 0);
    rep.expect(none.has_value() && !none->has_value(), "no_color for everyone gives nullopt");
    rep.expect_ok(comm.barrier(), "barrier");
  }));
}

TEST_CASE("consistency check: matching calls run, a mismatch is Errc::mismatch on every rank", "[nccl][check]") {
  Options o;
  o.check_consistency = true;
  o.op_timeout = std::chrono::milliseconds(20000);
  require_all(run_fresh(ngpus(), o, [](Nccl& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    DeviceBuffer<std::int64_t> buf(4);
    Array<std::int64_t> v(4);
    auto fill = [&](std::int64_t x) {
      for (std::size_t i = 0; i < 4; ++i) v[i] = x;
      buf.write(v);
    };
    const auto sum = static_cast<std::int64_t>(w * (w - 1) / 2);
    fill(static_cast<std::int64_t>(r));
    rep.expect_ok(comm.all_reduce(buf.address(), 4, DType::I64, ReduceOp::Sum), "checked all_reduce");
    rep.expect_ok(comm.sync(), "sync");
    rep.expect(buf.read()[3] == sum, "checked all_reduce value");
    rep.expect_ok(comm.all_reduce(buf.address(), 0, DType::I64, ReduceOp::Sum), "checked all_reduce of 0 elements");
    rep.expect_ok(comm.barrier(), "checked barrier");
    auto sub = comm.split(0, static_cast<std::uint32_t>(r));
    rep.expect(sub.has_value() && sub->has_value(), "checked split");
    if (w > 1) {
      // The last rank calls with another count: every rank must say so, nothing runs.
      fill(1);
      const Status s = comm.all_reduce(buf.address(), r == w - 1 ? 3 : 4, DType::I64, ReduceOp::Sum);
      // Each rank names the ranks that differ from it.
      const std::size_t odd = r == w - 1 ? 0 : w - 1;
      expect_error(rep, s, Errc::mismatch, "consistency check failed: rank " + std::to_string(odd) + " called",
                   "all_reduce with a count that differs on one rank");
      rep.expect_ok(comm.sync(), "sync after the mismatch");
      rep.expect(buf.read()[0] == 1, "nothing ran");
      // Another call type on rank 0 (broadcast against all_reduce).
      const Status t = r == 0 ? comm.broadcast(buf.address(), 4, DType::I64, 0)
                              : comm.all_reduce(buf.address(), 4, DType::I64, ReduceOp::Sum);
      expect_error(rep, t, Errc::mismatch, r == 0 ? "rank 1 called #" : "rank 0 called #",
                   "broadcast against all_reduce");
    }
    // The ranks stayed in step: a matching call works.
    fill(static_cast<std::int64_t>(r));
    rep.expect_ok(comm.all_reduce(buf.address(), 4, DType::I64, ReduceOp::Sum), "all_reduce after the checks");
    rep.expect_ok(comm.sync(), "sync");
    rep.expect(buf.read()[0] == sum, "all_reduce after the checks: value");
    rep.expect(comm.pending() == 0, "nothing pending");
  }));
}

TEST_CASE("AnyCommunicator holds an Nccl", "[nccl][any]") {
  require_all(run_fresh(ngpus(), {}, [](Nccl& comm, Report& rep) {
    const std::size_t w = comm.world_size();
    AnyCommunicator any{std::move(comm)};
    rep.expect(any.backend_name() == "nccl", "backend_name");
    rep.expect(any.target<Nccl>() != nullptr, "target<Nccl>");
    rep.expect(any.as_stream_sync() != nullptr, "as_stream_sync through Any");
    DeviceBuffer<std::int32_t> buf(10);
    Array<std::int32_t> ones(10);
    for (auto& x : ones) x = 1;
    buf.write(ones);
    rep.expect_ok(any.all_reduce(buf.address(), 10, DType::I32, ReduceOp::Sum), "any all_reduce");
    rep.expect_ok(any.sync(), "any sync");
    rep.expect(buf.read()[9] == static_cast<std::int32_t>(w), "any all_reduce value");
    auto parts = any.split(0, 0);
    rep.expect(parts.has_value() && parts->has_value() && (*parts)->world_size() == w, "any split");
    rep.expect(parts && parts->has_value() && (*parts)->backend_name() == "nccl", "split keeps the backend");
  }));
}

TEST_CASE("from_unique_id from threads; factory argument errors", "[nccl][init]") {
  const std::size_t w = ngpus();
  auto id = Nccl::unique_id();
  REQUIRE(id);
  std::vector<Result<Nccl>> made;
  for (std::size_t r = 0; r < w; ++r) made.emplace_back(tl::unexpected(Error{}));
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < w; ++r) {
      threads.emplace_back([&, r] { made[r] = Nccl::from_unique_id(*id, w, r, static_cast<int>(r)); });
    }
  }
  std::vector<Nccl> comms;
  for (auto& m : made) {
    INFO((m ? std::string("ok") : m.error().message));
    REQUIRE(m);
    comms.push_back(std::move(*m));
  }
  std::function<void(Nccl&, Report&)> body = [](Nccl& comm, Report& rep) {
    DeviceBuffer<std::uint64_t> v(3);
    Array<std::uint64_t> a(3);
    for (auto& x : a) x = comm.rank() + 1;
    v.write(a);
    rep.expect_ok(comm.all_reduce(v.address(), 3, DType::U64, ReduceOp::Prod), "all_reduce prod");
    rep.expect_ok(comm.sync(), "sync");
    std::uint64_t want = 1;
    for (std::size_t q = 1; q <= comm.world_size(); ++q) want *= q;
    rep.expect(v.read()[2] == want, "prod value");
  };
  require_all(run_on(comms, body));

  auto bad_rank = Nccl::from_unique_id(*id, 2, 2, 0);
  REQUIRE_FALSE(bad_rank);
  CHECK(bad_rank.error().code == Errc::invalid_argument);
  auto bad_device = Nccl::from_unique_id(*id, 1, 0, gpu_count());
  REQUIRE_FALSE(bad_device);
  CHECK(bad_device.error().code == Errc::invalid_argument);
  CHECK(contains(bad_device.error().message, "does not exist"));
  const int twice[] = {0, 0};
  auto dup = Nccl::init_all(twice);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == Errc::invalid_argument);
  CHECK(contains(dup.error().message, "appears twice"));
  CHECK_FALSE(Nccl::init_all(std::span<const int>{}));
}

// Last, and run as its own meson test: it leaves NCCL's bootstrap of a
// communicator that never completes to ncclCommAbort.
TEST_CASE("init timeout: a rank that never joins", "[init_timeout]") {
  auto id = Nccl::unique_id();
  REQUIRE(id);
  Options o;
  o.op_timeout = 1000ms;
  const auto t0 = Clock::now();
  auto lonely = Nccl::from_unique_id(*id, 2, 0, 0, o);  // rank 1 never comes
  const auto took = ms_since(t0);
  REQUIRE_FALSE(lonely);
  INFO(lonely.error().message);
  CHECK(lonely.error().code == Errc::timeout);
  CHECK(contains(lonely.error().message, "did every rank join"));
  CHECK(took >= 990);
  CHECK(took < 30000);
}

}  // namespace polycoll::test

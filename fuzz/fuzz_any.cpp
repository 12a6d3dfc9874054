// libFuzzer target: arbitrary call sequences through AnyCommunicator on NoOp
// (world 1) and on Threads (world 2, every rank running the same decoded
// sequence, so collectives match). Raw DType/ReduceOp values include invalid
// ones; addresses are null or a real buffer large enough for the count (a
// count larger than a real buffer is a caller bug no library can detect).
// Properties: no crash, no sanitizer report, no hang (op_timeout bounds every
// wait), and every invalid call is an Error with a message.
#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>
#include <polycoll/backends/threads.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace polycoll;

struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::uint32_t u32() { return std::uint32_t{u8()} | std::uint32_t{u8()} << 8 | std::uint32_t{u8()} << 16 | std::uint32_t{u8()} << 24; }
};

struct Call {
  std::uint8_t op;
  DType dtype;
  ReduceOp rop;
  bool null_address;
  std::size_t count;
  std::size_t peer;
  std::uint32_t tag;
  std::uint32_t color;
};

constexpr std::size_t cap_bytes = 4096;

std::vector<Call> decode(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  std::vector<Call> calls;
  while (r.n > 0 && calls.size() < 64) {
    Call c{};
    c.op = r.u8() % 9;
    c.dtype = static_cast<DType>(r.u8());  // any byte: most are not enumerators
    c.rop = static_cast<ReduceOp>(r.u8() % 8);
    const std::uint8_t a = r.u8();
    c.null_address = (a & 7) == 0;
    const std::uint32_t raw = r.u32();
    if (c.null_address) {
      // Anything, including counts whose byte size overflows.
      c.count = (a & 8) ? (SIZE_MAX >> (raw % 8)) - (raw >> 8) % 3 : raw % 100000;
    } else {
      // Small enough that count * world elements of 16 bytes fit the buffer.
      c.count = raw % (cap_bytes / 16 / 2 + 1);
    }
    c.peer = r.u8() % 4;  // sometimes out of range
    c.tag = r.u8() % 4;
    c.color = r.u8() % 3 == 0 ? no_color : r.u8() % 2;
    calls.push_back(c);
  }
  return calls;
}

void check_error(const Status& s) {
  if (!s && s.error().message.empty()) std::abort();  // an Error must say what went wrong
}

void run(AnyCommunicator& comm, const std::vector<Call>& calls, int depth = 0) {
  alignas(64) std::array<std::uint8_t, cap_bytes> a{}, b{};
  const std::size_t w = comm.world_size();
  for (const Call& c : calls) {
    const std::uint64_t pa = c.null_address ? 0 : detail::to_address(a.data());
    const std::uint64_t pb = c.null_address ? 0 : detail::to_address(b.data());
    // p2p peers are rank-relative so that both ranks post a matching pair.
    const std::size_t to = c.peer < w ? (comm.rank() + c.peer) % w : c.peer + w;
    const std::size_t from = c.peer < w ? (comm.rank() + w - c.peer % w) % w : c.peer + w;
    switch (c.op) {
      case 0: check_error(comm.all_reduce(pa, c.count, c.dtype, c.rop)); break;
      case 1: check_error(comm.broadcast(pa, c.count, c.dtype, c.peer)); break;
      case 2: check_error(comm.all_gather(pa, pb, c.count, c.dtype)); break;
      case 3: check_error(comm.reduce_scatter(pb, pa, c.count, c.dtype, c.rop)); break;
      case 4: {
        const Status s = comm.send(pa, c.count, c.dtype, to, c.tag);
        check_error(s);
        const Status r = comm.recv(pb, c.count, c.dtype, from, c.tag);
        check_error(r);
        check_error(comm.sync());
        break;
      }
      case 5: check_error(comm.sync()); break;
      case 6: check_error(comm.barrier()); break;
      case 7:
        if (depth < 2) {
          auto sub = comm.split(c.color, c.tag);
          if (!sub && sub.error().message.empty()) std::abort();
          if (sub && sub->has_value()) run(**sub, {}, depth + 1);
        }
        break;
      default: check_error(comm.all_reduce(pa, c.count, c.dtype, ReduceOp::Sum)); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto calls = decode(data, size);
  {
    AnyCommunicator noop{NoOp{}};
    run(noop, calls);
  }
  Options o;
  o.op_timeout = std::chrono::milliseconds(2000);
  o.drop_timeout = std::chrono::milliseconds(50);
  auto comms = Threads::create(2, o);
  if (!comms) std::abort();
  std::vector<AnyCommunicator> any;
  for (auto& c : *comms) any.emplace_back(std::move(c));
  std::thread peer([&] { run(any[1], calls); });
  run(any[0], calls);
  peer.join();
  return 0;
}

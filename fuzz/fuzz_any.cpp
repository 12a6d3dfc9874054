// libFuzzer target: arbitrary call sequences through AnyCommunicator on NoOp
// (world 1) and on Threads (world 2, every rank running the same decoded
// sequence, so collectives match), covering the whole run-time surface: the
// seed collectives, reduce/gather/scatter (fuzzed roots), all_to_all,
// all_gather_v/all_to_all_v (fuzzed counts and displacements: wrong lengths,
// overlapping blocks, size_t overflow, packed and explicit), send/recv,
// send_recv, group_start/group_end (explicit and RAII, nested, unbalanced)
// around them, split (sub-communicators run a slice of the sequence), sync,
// barrier and calls on a moved-from AnyCommunicator.
//
// Arguments: raw DType/ReduceOp values include invalid ones; roots and peers
// are sometimes out of range (up to SIZE_MAX); every address is null or a
// buffer of its own, allocated with exactly the bytes the call may touch (so
// ASan sees any access past what the contract allows), or the documented
// in-place form, or an overlapping pair. A count larger than a real buffer is
// a caller bug no library can detect, so a call whose real buffer would have
// to be huge passes null instead. Buffers live until the communicators are
// destroyed (pending send/recv may still refer to them).
//
// Threads without the consistency check cannot tell mismatched collectives
// apart (a caller bug: hang or corrupted data), so there the decoder keeps
// every argument whose validity could differ between ranks (the root-only
// buffers of rooted calls, all_gather_v's per-rank send, rank-dependent
// all_to_all_v counts) to forms all ranks accept or reject alike. With the
// check on (a header bit) anything goes: a rank rejecting a call alone must
// lead to Errc::mismatch or a timeout, never to a crash.
//
// Properties: no crash, no sanitizer report, no hang (op_timeout bounds every
// wait), every failed call's Error has a message (and a valid Errc), every
// log record has a message, and a call whose arguments are invalid on their
// face (unknown dtype, invalid dtype/op pair, root or peer out of range, null
// with count > 0, byte size overflow, malformed or overlapping counts and
// displacements, overlapping send/recv where the contract forbids it) fails.
#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>
#include <polycoll/backends/threads.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <thread>
#include <tuple>
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

enum Op : std::uint8_t {
  op_all_reduce,
  op_broadcast,
  op_all_gather,
  op_reduce_scatter,
  op_send_recv_sync,  // send, recv, sync
  op_sync,
  op_barrier,
  op_split,
  op_reduce,
  op_gather,
  op_scatter,
  op_all_to_all,
  op_all_gather_v,
  op_all_to_all_v,
  op_send_recv,  // the one-call form
  op_group,      // group around the next `span` calls
  op_group_start,
  op_group_end,
  op_send,
  op_recv,
  op_moved_from,
  op_count_
};

constexpr std::size_t max_calls = 64;
constexpr std::size_t entries = 4;                // counts/displacements per array: a 2x2 matrix, or world + 1 <= 3
constexpr std::size_t max_buffer = 256 * 1024;    // bytes of one real buffer (per block of a world-sized one)

// A decoded counts or displacements array; its length is chosen at run time
// from the world size.
struct Array {
  std::uint8_t length;  // see Array::size
  std::array<std::size_t, entries> v;
};

struct Call {
  std::uint8_t op;
  DType dtype;
  ReduceOp rop;
  std::uint8_t modes;  // bits 0-1: first buffer, 2-3: second buffer (0 null, else real), 4: in place / overlap
  std::size_t count;
  std::size_t count2;
  std::size_t peer;  // root, or p2p peer relative to the rank
  std::size_t peer2;
  std::uint32_t tag;
  std::uint8_t variant;
  std::uint8_t span;  // split and group: how many of the following calls belong to it
  std::uint8_t seed;  // buffer contents
  std::uint32_t color;
  std::uint32_t key;
  std::array<Array, 4> arrays;
};

std::size_t huge(std::uint32_t raw) {
  static constexpr std::size_t base[] = {SIZE_MAX,          SIZE_MAX / 2,           SIZE_MAX / 3,        SIZE_MAX / 4,
                                         SIZE_MAX / 8,      SIZE_MAX / 16,          SIZE_MAX / 32,       std::size_t{1} << 32,
                                         std::size_t{1} << 31, std::size_t{100000}};
  return base[raw % std::size(base)] + std::size_t{(raw >> 8) % 5} - 2;  // wraps near SIZE_MAX: still a count
}

std::size_t decode_count(Reader& r, unsigned cls) {
  const std::uint32_t raw = r.u32();
  switch (cls & 7) {
    case 5: return raw % 4097;  // 64 KiB of c128: past the Threads small-message path
    case 6: return huge(raw);
    case 7: return 0;
    default: return raw % 65;
  }
}

std::size_t decode_peer(Reader& r) {
  const std::uint8_t b = r.u8();
  return b >= 0xF0 ? SIZE_MAX - (b & 0xF) : b % 4;  // 0 .. 3 (out of range from the world size on), or huge
}

std::size_t decode_entry(Reader& r, bool displacement) {
  static constexpr std::size_t big[] = {SIZE_MAX,         SIZE_MAX - 1,         SIZE_MAX - 47,        SIZE_MAX / 2,
                                        SIZE_MAX / 2 + 1, SIZE_MAX / 16,        SIZE_MAX / 16 + 1,    std::size_t{1} << 32,
                                        std::size_t{1} << 62, std::size_t{100000}};
  const std::uint8_t b = r.u8();
  if (b >= 0xE0) return big[(b - 0xE0) % std::size(big)];
  return displacement ? b % 96 : b % 48;
}

Array decode_array(Reader& r, bool displacement) {
  Array a{};
  a.length = r.u8();
  for (auto& x : a.v) x = decode_entry(r, displacement);
  return a;
}

std::vector<Call> decode(Reader& r) {
  std::vector<Call> calls;
  while (r.n > 0 && calls.size() < max_calls) {
    Call c{};
    c.op = r.u8() % op_count_;
    c.dtype = static_cast<DType>(r.u8());  // any byte: most are not enumerators
    c.rop = static_cast<ReduceOp>(r.u8() % 8);
    c.modes = r.u8();
    c.count = decode_count(r, c.modes >> 5);
    c.peer = decode_peer(r);
    c.seed = r.u8();
    switch (c.op) {
      case op_send_recv_sync:
      case op_send:
      case op_recv: c.tag = r.u8() % 4; break;
      case op_send_recv:
        c.tag = r.u8() % 4;
        c.variant = r.u8();
        c.peer2 = decode_peer(r);
        c.count2 = decode_count(r, c.variant >> 5);
        break;
      case op_split:
        c.variant = r.u8();
        c.span = r.u8() % 8;
        c.color = r.u8();
        c.key = r.u8();
        break;
      case op_group:
        c.variant = r.u8();
        c.span = r.u8() % 5;
        break;
      case op_all_gather_v:
        c.variant = r.u8();
        c.arrays[0] = decode_array(r, false);
        c.arrays[1] = decode_array(r, true);
        break;
      case op_all_to_all_v:
        c.variant = r.u8();
        c.arrays[0] = decode_array(r, false);
        c.arrays[1] = decode_array(r, true);
        c.arrays[2] = decode_array(r, false);
        c.arrays[3] = decode_array(r, true);
        break;
      default: break;
    }
    calls.push_back(c);
  }
  return calls;
}

// ------------------------------------------------------------------ properties

[[noreturn]] void fail_property(const char* what, const Call& c) {
  std::fprintf(stderr, "fuzz_any: %s (op %u, dtype %u, reduce_op %u, count %zu, peer %zu, modes 0x%02x)\n", what,
               unsigned{c.op}, unsigned(static_cast<std::uint8_t>(c.dtype)), unsigned(static_cast<std::uint8_t>(c.rop)),
               c.count, c.peer, unsigned{c.modes});
  std::abort();
}

void check_error(const Error& e, const Call& c) {
  if (e.message.empty()) fail_property("an Error without a message", c);
  if (static_cast<unsigned>(e.code) > static_cast<unsigned>(Errc::not_initialized)) fail_property("an Error with an invalid Errc", c);
}

void check(const Status& s, const Call& c, bool must_fail = false) {
  if (!s) return check_error(s.error(), c);
  if (must_fail) fail_property("a call with invalid arguments succeeded", c);
}

void quiet_sink(LogLevel, std::string_view message) noexcept {
  if (message.empty()) std::abort();  // a log record must say something
}

// ------------------------------------------------------------------ buffers

std::size_t elem_of(DType d) { return is_known(d) ? size_of(d) : 1; }  // as the front end counts an unknown dtype

// Every real buffer of one rank, alive until its communicators are gone.
class Arena {
 public:
  std::uint64_t get(std::size_t bytes, std::uint8_t seed, DType dtype) {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    auto* p = static_cast<std::uint8_t*>(::operator new[](n, std::align_val_t{64}));
    blocks_.emplace_back(p);
    const bool boolean = dtype == DType::Bool;  // any other byte in a bool is the caller's UB
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::uint8_t>(seed + i * 0x9du + (i >> 8));
      p[i] = boolean ? v & 1u : v;
    }
    return reinterpret_cast<std::uintptr_t>(p);
  }

 private:
  struct Free {
    void operator()(std::uint8_t* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::vector<std::unique_ptr<std::uint8_t, Free>> blocks_;
};

// One buffer argument and whether the front end must reject it.
struct Arg {
  std::uint64_t addr = 0;
  std::size_t bytes = 0;  // what the call may touch (0 when `bad` by overflow)
  bool bad = false;
};

std::optional<std::size_t> bytes_of(std::size_t count, std::size_t blocks, DType d) {
  std::size_t n = 0, b = 0;
  if (__builtin_mul_overflow(count, blocks == 0 ? 1 : blocks, &n) || __builtin_mul_overflow(n, elem_of(d), &b)) {
    return std::nullopt;
  }
  return b;
}

// Null, or a real buffer of exactly count * blocks elements.
Arg buffer(Arena& arena, bool real, std::size_t count, std::size_t blocks, DType d, std::uint8_t seed) {
  Arg a;
  const auto b = bytes_of(count, blocks, d);
  if (!b) {
    a.bad = true;
    a.addr = real ? arena.get(1, seed, d) : 0;
    return a;
  }
  a.bytes = *b;
  if (real && *b > max_buffer * std::max<std::size_t>(blocks, 1)) real = false;  // too big to be real: a caller bug
  if (!real) {
    a.bad = count != 0;
    return a;
  }
  a.addr = arena.get(*b, seed, d);
  return a;
}

// Two overlapping buffers in one allocation: `first` at its start, `second`
// at offset `off` elements (< first's elements), both complete.
std::pair<Arg, Arg> overlapping(Arena& arena, std::size_t n1, std::size_t n2, DType d, std::uint8_t seed) {
  const std::size_t elem = elem_of(d);
  const std::size_t off = n1 == 0 ? 0 : (seed % n1) * elem;
  const std::size_t total = std::max(n1 * elem, off + n2 * elem);
  const std::uint64_t base = arena.get(total, seed, d);
  return {Arg{base, n1 * elem, false}, Arg{base + off, n2 * elem, false}};
}

bool ranges_overlap(const Arg& a, const Arg& b) {
  return a.bytes != 0 && b.bytes != 0 && a.addr != 0 && b.addr != 0 && a.addr < b.addr + b.bytes && b.addr < a.addr + a.bytes;
}

bool real_mode(const Call& c, unsigned which) { return ((c.modes >> (2 * which)) & 3) != 0; }
bool special(const Call& c) { return (c.modes & 0x10) != 0; }

// ------------------------------------------------------------------ v layouts

// The harness's own reading of the contract (detail/layout.hpp is what it tests).
struct LayoutCheck {
  bool ok = false;
  std::size_t extent = 0;
};

LayoutCheck check_layout(std::span<const std::size_t> counts, std::span<const std::size_t> displs, std::size_t w) {
  if (counts.size() != w || (!displs.empty() && displs.size() != w)) return {};
  LayoutCheck r;
  std::size_t run = 0;
  std::vector<std::size_t> starts(w);
  for (std::size_t q = 0; q < w; ++q) {
    const std::size_t d = displs.empty() ? run : displs[q];
    std::size_t end = 0;
    if (__builtin_add_overflow(d, counts[q], &end)) return {};
    run = end;
    starts[q] = d;
    r.extent = std::max(r.extent, end);
  }
  for (std::size_t a = 0; a < w; ++a) {
    for (std::size_t b = a + 1; b < w; ++b) {
      if (counts[a] != 0 && counts[b] != 0 && starts[a] < starts[b] + counts[b] && starts[b] < starts[a] + counts[a]) {
        return {};
      }
    }
  }
  r.ok = true;
  return r;
}

// The decoded length: mostly the world size, sometimes one more or one less;
// displacements are often absent (packed).
std::size_t length_of(const Array& a, std::size_t w, bool displacement) {
  const unsigned m = a.length % 8;
  if (displacement) {
    if (m < 3) return w;
    if (m < 6) return 0;
  } else if (m < 6) {
    return w;
  }
  return (m & 1) ? w + 1 : w - 1;
}

std::vector<std::size_t> take(const Array& a, std::size_t w, bool displacement) {
  const std::size_t n = std::min(length_of(a, w, displacement), entries);
  return {a.v.begin(), a.v.begin() + static_cast<std::ptrdiff_t>(n)};
}

// displ(q) of a checked layout.
std::size_t displ_of(std::span<const std::size_t> counts, std::span<const std::size_t> displs, std::size_t q) {
  if (!displs.empty()) return displs[q];
  std::size_t d = 0;
  for (std::size_t i = 0; i < q; ++i) d += counts[i];
  return d;
}

struct A2avPlan {
  std::vector<std::size_t> sc, sd, rc, rd;
  LayoutCheck s, r;
  bool must_fail = false;
};

// all_to_all_v's arrays on `rank`. In matrix form the counts are one w x w
// matrix M (entries row-major): rank p sends M[p][q] to q, and q expects
// M[p][q] from p, so the pairs agree although the arrays differ by rank.
A2avPlan plan_a2av(const Call& c, std::size_t w, std::size_t rank, bool matrix) {
  A2avPlan p;
  if (matrix) {
    p.sc.resize(w);
    p.rc.resize(w);
    for (std::size_t q = 0; q < w; ++q) {
      p.sc[q] = c.arrays[0].v[(rank * w + q) % entries];
      p.rc[q] = c.arrays[0].v[(q * w + rank) % entries];
    }
  } else {
    p.sc = take(c.arrays[0], w, false);
    p.rc = take(c.arrays[2], w, false);
  }
  p.sd = take(c.arrays[1], w, true);
  p.rd = take(c.arrays[3], w, true);
  p.s = check_layout(p.sc, p.sd, w);
  p.r = check_layout(p.rc, p.rd, w);
  if (!p.s.ok || !p.r.ok || !is_known(c.dtype)) {
    p.must_fail = true;
    return p;
  }
  // Buffers: null, or real when not too big (else null); either way bad iff null with a non-empty extent.
  const auto sb = bytes_of(p.s.extent, 1, c.dtype), rb = bytes_of(p.r.extent, 1, c.dtype);
  const bool s_null = !real_mode(c, 0) || !sb || *sb > max_buffer;
  const bool r_null = !real_mode(c, 1) || !rb || *rb > max_buffer;
  p.must_fail = !sb || !rb || (s_null && p.s.extent != 0) || (r_null && p.r.extent != 0);
  return p;
}

// ------------------------------------------------------------------ the run

struct Ctx {
  Arena& arena;
  bool check_on;  // Options::check_consistency on the Threads world
};

// p2p peers are relative to the rank so that every rank posts the matching
// half; an out-of-range value stays out of range.
std::size_t dest_of(std::size_t k, std::size_t rank, std::size_t w) {
  if (k < w) return (rank + k) % w;
  return k < 4 ? k + w : k;
}
std::size_t src_of(std::size_t k, std::size_t rank, std::size_t w) {
  if (k < w) return (rank + w - k) % w;
  return k < 4 ? k + w : k;
}

// Rooted collectives: `local` (count elements, on every rank) and `at_root`
// (count * blocks, used on the root only). In place: local is the root's
// own block of at_root.
struct Rooted {
  Arg local, at_root;
  bool must_fail;
};

Rooted rooted(Ctx& ctx, const Call& c, std::size_t w, std::size_t rank, std::size_t blocks) {
  const std::size_t root = c.peer;
  const bool root_ok = root < w;
  const bool is_root = rank == root;
  // Where the ranks could disagree about the call, keep to what all accept or reject alike.
  const bool asym_ok = ctx.check_on || w == 1;
  Rooted r{};
  r.local = buffer(ctx.arena, real_mode(c, 0), c.count, 1, c.dtype, c.seed);
  bool at_root_real = real_mode(c, 1);
  if (!asym_ok && root_ok && !r.local.bad) at_root_real = true;
  const std::size_t elem = elem_of(c.dtype);
  if (special(c) && is_root && root_ok && real_mode(c, 0) && !r.local.bad) {
    if ((c.seed & 1) == 0) {
      // The documented in-place form.
      r.at_root = buffer(ctx.arena, true, c.count, blocks, c.dtype, c.seed);
      if (r.at_root.addr != 0 && !r.at_root.bad) {
        r.local.addr = r.at_root.addr + (blocks == 1 ? 0 : root * c.count * elem);
      }
    } else if (asym_ok) {
      // Overlapping but not in place (unless the offset happens to be the root's block).
      auto [a, l] = overlapping(ctx.arena, c.count * blocks, c.count, c.dtype, static_cast<std::uint8_t>(c.seed >> 1));
      r.at_root = a;
      r.local = l;
    } else {
      r.at_root = buffer(ctx.arena, true, c.count, blocks, c.dtype, c.seed);
    }
  } else {
    r.at_root = buffer(ctx.arena, at_root_real, c.count, blocks, c.dtype, static_cast<std::uint8_t>(c.seed + 1));
  }
  r.must_fail = !root_ok || r.local.bad || (is_root && r.at_root.bad) || !is_known(c.dtype);
  return r;
}

void run(AnyCommunicator& comm, std::span<const Call> calls, Ctx& ctx, int split_depth, int group_depth);

// Every call on a moved-from AnyCommunicator fails with a message.
void moved_from(AnyCommunicator& comm, const Call& c) {
  AnyCommunicator held = std::move(comm);
  if (comm.has_value() || comm.world_size() != 0) fail_property("a moved-from AnyCommunicator still holds a backend", c);
  const std::uint64_t p = 0;
  check(comm.all_reduce(p, 0, c.dtype, c.rop), c, true);
  check(comm.broadcast(p, 0, c.dtype, 0), c, true);
  check(comm.all_gather(p, p, 0, c.dtype), c, true);
  check(comm.reduce_scatter(p, p, 0, c.dtype, c.rop), c, true);
  check(comm.send(p, 0, c.dtype, 0, 0), c, true);
  check(comm.recv(p, 0, c.dtype, 0, 0), c, true);
  check(comm.reduce(p, p, 0, c.dtype, c.rop, 0), c, true);
  check(comm.gather(p, p, 0, c.dtype, 0), c, true);
  check(comm.scatter(p, p, 0, c.dtype, 0), c, true);
  check(comm.all_to_all(p, p, 0, c.dtype), c, true);
  const std::size_t zero[1] = {0};
  check(comm.all_gather_v(p, 0, p, zero, {}, c.dtype), c, true);
  check(comm.all_to_all_v(p, zero, {}, p, zero, {}, c.dtype), c, true);
  check(comm.send_recv(p, 0, 0, p, 0, 0, c.dtype, 0), c, true);
  check(comm.group_start(), c, true);
  check(comm.group_end(), c, true);
  {
    auto g = comm.group();
    check(g.end(), c, true);
  }
  check(comm.sync(), c, true);
  check(comm.barrier(), c, true);
  auto sub = comm.split(0, 0);
  if (sub) fail_property("split on a moved-from AnyCommunicator succeeded", c);
  check_error(sub.error(), c);
  if (comm.as_stream_sync() != nullptr) fail_property("a moved-from AnyCommunicator has stream operations", c);
  comm = std::move(held);
}

void p2p_send(AnyCommunicator& comm, Ctx& ctx, const Call& c, bool real) {
  const std::size_t w = comm.world_size();
  const std::size_t to = dest_of(c.peer, comm.rank(), w);
  const Arg a = buffer(ctx.arena, real, c.count, 1, c.dtype, c.seed);
  check(comm.send(a.addr, c.count, c.dtype, to, c.tag), c, a.bad || to >= w || !is_known(c.dtype));
}

void p2p_recv(AnyCommunicator& comm, Ctx& ctx, const Call& c, bool real) {
  const std::size_t w = comm.world_size();
  const std::size_t from = src_of(c.peer, comm.rank(), w);
  const Arg b = buffer(ctx.arena, real, c.count, 1, c.dtype, c.seed);
  // any_source (SIZE_MAX, one of decode_peer's huge peers) is a valid source:
  // NoOp, Threads and AnyCommunicator support wildcard receives.
  const bool bad_source = from >= w && from != polycoll::any_source;
  check(comm.recv(b.addr, c.count, c.dtype, from, c.tag), c, b.bad || bad_source || !is_known(c.dtype));
}

void send_recv(AnyCommunicator& comm, Ctx& ctx, const Call& c) {
  const std::size_t w = comm.world_size(), rank = comm.rank();
  const std::size_t dest = dest_of(c.peer, rank, w);
  // Mostly the matching source; sometimes another one (then sync times out or mismatches).
  const std::size_t src = src_of((c.variant & 7) != 7 ? c.peer : c.peer2, rank, w);
  std::size_t rn = c.count;
  switch ((c.variant >> 3) & 3) {
    case 0: break;
    case 1: rn = c.count + 1; break;
    case 2: rn = c.count == 0 ? 0 : c.count - 1; break;  // truncated at the receiver
    default: rn = c.count2; break;
  }
  Arg s, r;
  bool overlap = false;
  if (special(c) && real_mode(c, 0) && real_mode(c, 1) && bytes_of(c.count, 1, c.dtype).value_or(SIZE_MAX) <= max_buffer &&
      bytes_of(rn, 1, c.dtype).value_or(SIZE_MAX) <= max_buffer) {
    std::tie(s, r) = overlapping(ctx.arena, c.count, rn, c.dtype, c.seed);
    overlap = true;
  } else {
    s = buffer(ctx.arena, real_mode(c, 0), c.count, 1, c.dtype, c.seed);
    r = buffer(ctx.arena, real_mode(c, 1), rn, 1, c.dtype, static_cast<std::uint8_t>(c.seed + 1));
  }
  const bool must_fail = dest >= w || src >= w || s.bad || r.bad || !is_known(c.dtype) || (overlap && ranges_overlap(s, r));
  check(comm.send_recv(s.addr, c.count, dest, r.addr, rn, src, c.dtype, c.tag), c, must_fail);
  if (c.variant & 0x80) check(comm.sync(), c);
}

void all_gather_v(AnyCommunicator& comm, Ctx& ctx, const Call& c) {
  const std::size_t w = comm.world_size(), rank = comm.rank();
  const bool asym_ok = ctx.check_on || w == 1;
  const auto counts = take(c.arrays[0], w, false);
  const auto displs = take(c.arrays[1], w, true);
  const LayoutCheck lc = check_layout(counts, displs, w);
  // send_count: this rank's count (the correct call) or, where ranks may disagree, any small value.
  std::size_t send_count = rank < counts.size() ? counts[rank] : c.count;
  if ((c.variant & 3) == 3 && (asym_ok || !lc.ok)) send_count = c.count % 65;
  unsigned form = (c.variant >> 2) & 3;  // 0: separate, 1: in place, 2: overlapping, 3: separate
  const bool recv_real = real_mode(c, 1);
  bool send_real = real_mode(c, 0);
  if (!asym_ok && lc.ok) {
    send_real = true;  // a rank-dependent null send would be rejected on some ranks only
    if (form == 2) form = 0;
  }
  Arg r = buffer(ctx.arena, recv_real, lc.ok ? lc.extent : 1, 1, c.dtype, c.seed);
  if (!lc.ok) r.bad = true;
  Arg s;
  bool overlap = false;
  if (form == 1 && lc.ok && r.addr != 0 && !r.bad && rank < counts.size() && send_count == counts[rank]) {
    s = Arg{r.addr + displ_of(counts, displs, rank) * elem_of(c.dtype), send_count * elem_of(c.dtype), false};
  } else if (form == 2 && lc.ok && r.addr != 0 && !r.bad && send_real &&
             bytes_of(send_count, 1, c.dtype).value_or(SIZE_MAX) <= max_buffer) {
    auto [base, part] = overlapping(ctx.arena, lc.extent, send_count, c.dtype, c.seed);
    r = base;
    s = part;
    overlap = true;
  } else {
    s = buffer(ctx.arena, send_real, send_count, 1, c.dtype, static_cast<std::uint8_t>(c.seed + 1));
  }
  const bool exact_in_place = lc.ok && s.addr == r.addr + displ_of(counts, displs, rank) * elem_of(c.dtype);
  const bool must_fail = !lc.ok || !is_known(c.dtype) || s.bad || r.bad || send_count != counts[rank] ||
                         (overlap && !exact_in_place && ranges_overlap(s, r));
  check(comm.all_gather_v(s.addr, send_count, r.addr, counts, displs, c.dtype), c, must_fail);
}

void all_to_all_v(AnyCommunicator& comm, Ctx& ctx, const Call& c) {
  const std::size_t w = comm.world_size(), rank = comm.rank();
  const bool asym_ok = ctx.check_on || w == 1;
  bool matrix = (c.variant & 1) != 0;
  if (matrix && !asym_ok) {
    // The arrays differ by rank: use the matrix only if every rank's call is rejected or passes alike.
    const bool mine = plan_a2av(c, w, rank, true).must_fail;
    for (std::size_t q = 0; q < w; ++q) {
      if (plan_a2av(c, w, q, true).must_fail != mine) matrix = false;
    }
  }
  const A2avPlan p = plan_a2av(c, w, rank, matrix);
  Arg s, r;
  bool overlap = false;
  if (p.s.ok && p.r.ok) {
    const auto sb = bytes_of(p.s.extent, 1, c.dtype), rb = bytes_of(p.r.extent, 1, c.dtype);
    // Rank-dependent extents could make the overlap rejected on some ranks only.
    const bool overlap_ok = asym_ok || !matrix;
    if (overlap_ok && special(c) && real_mode(c, 0) && real_mode(c, 1) && sb && rb && *sb <= max_buffer &&
        *rb <= max_buffer) {
      std::tie(s, r) = overlapping(ctx.arena, p.s.extent, p.r.extent, c.dtype, c.seed);
      overlap = true;
    } else {
      s = buffer(ctx.arena, real_mode(c, 0), p.s.extent, 1, c.dtype, c.seed);
      r = buffer(ctx.arena, real_mode(c, 1), p.r.extent, 1, c.dtype, static_cast<std::uint8_t>(c.seed + 1));
    }
  } else {
    // Malformed: rejected before any buffer is looked at (a real one-byte buffer shows if not).
    s = buffer(ctx.arena, real_mode(c, 0), 1, 1, DType::U8, c.seed);
    r = buffer(ctx.arena, real_mode(c, 1), 1, 1, DType::U8, c.seed);
  }
  const bool must_fail = p.must_fail || (overlap && ranges_overlap(s, r));
  check(comm.all_to_all_v(s.addr, p.sc, p.sd, r.addr, p.rc, p.rd, c.dtype), c, must_fail);
}

void split(AnyCommunicator& comm, Ctx& ctx, const Call& c, std::span<const Call> slice, int split_depth,
           int group_depth) {
  const std::size_t w = comm.world_size(), rank = comm.rank();
  std::uint32_t color = 0, key = 0;
  switch (c.variant % 6) {
    case 0: color = no_color; break;
    case 1: color = c.color; break;                              // everyone together
    case 2: color = static_cast<std::uint32_t>(rank); break;     // everyone alone
    case 3: color = rank == 0 ? no_color : 0; break;             // all but rank 0
    case 4: color = no_color - 1; break;                         // the largest real color
    default: color = rank == 0 ? 1 : no_color; break;            // rank 0 alone
  }
  switch ((c.variant >> 3) % 4) {
    case 0: key = c.key; break;
    case 1: key = static_cast<std::uint32_t>(w - rank); break;  // reversed order
    case 2: key = 0xFFFFFFFFu; break;
    default: key = static_cast<std::uint32_t>(rank); break;
  }
  auto sub = comm.split(color, key);
  if (!sub) return check_error(sub.error(), c);
  if (!sub->has_value()) {
    if (color != no_color && comm.backend_name() == "threads") fail_property("split with a color gave no communicator", c);
    return;
  }
  if (color == no_color) fail_property("split with no_color gave a communicator", c);
  AnyCommunicator& s = **sub;
  if (s.world_size() == 0 || s.rank() >= s.world_size() || s.world_size() > w) fail_property("split gave a bad world", c);
  run(s, slice, ctx, split_depth + 1, group_depth);
}

void group(AnyCommunicator& comm, Ctx& ctx, const Call& c, std::span<const Call> slice, int split_depth,
           int group_depth) {
  if (group_depth >= 4) return run(comm, slice, ctx, split_depth, group_depth);
  switch (c.variant % 5) {
    case 0:  // explicit
      check(comm.group_start(), c);
      run(comm, slice, ctx, split_depth, group_depth + 1);
      check(comm.group_end(), c);
      break;
    case 1: {  // RAII, ended by end()
      auto g = comm.group();
      run(comm, slice, ctx, split_depth, group_depth + 1);
      check(g.end(), c);
      check(g.end(), c, true);  // twice: an error
      break;
    }
    case 2: {  // RAII, ended by the destructor
      auto g = comm.group();
      run(comm, slice, ctx, split_depth, group_depth + 1);
      break;
    }
    case 3:  // left open
      check(comm.group_start(), c);
      run(comm, slice, ctx, split_depth, group_depth + 1);
      break;
    default:  // ended twice: the second closes an outer group or fails
      check(comm.group_start(), c);
      run(comm, slice, ctx, split_depth, group_depth + 1);
      check(comm.group_end(), c);
      check(comm.group_end(), c);
      break;
  }
  if (c.variant & 0x80) check(comm.sync(), c);
}

void run(AnyCommunicator& comm, std::span<const Call> calls, Ctx& ctx, int split_depth, int group_depth) {
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const std::size_t w = comm.world_size(), rank = comm.rank();
    const bool known = is_known(c.dtype);
    const bool valid_op = is_valid(c.dtype, c.rop);
    const bool real0 = real_mode(c, 0), real1 = real_mode(c, 1);
    Arena& arena = ctx.arena;
    switch (c.op) {
      case op_all_reduce: {
        const Arg a = buffer(arena, real0, c.count, 1, c.dtype, c.seed);
        check(comm.all_reduce(a.addr, c.count, c.dtype, c.rop), c, a.bad || !valid_op);
        break;
      }
      case op_broadcast: {
        const Arg a = buffer(arena, real0, c.count, 1, c.dtype, c.seed);
        check(comm.broadcast(a.addr, c.count, c.dtype, c.peer), c, a.bad || c.peer >= w || !known);
        break;
      }
      case op_all_gather: {
        const Arg s = buffer(arena, real0, c.count, 1, c.dtype, c.seed);
        const Arg r = buffer(arena, real1, c.count, w, c.dtype, c.seed);
        check(comm.all_gather(s.addr, r.addr, c.count, c.dtype), c, s.bad || r.bad || !known);
        break;
      }
      case op_reduce_scatter: {
        const Arg s = buffer(arena, real0, c.count, w, c.dtype, c.seed);
        const Arg r = buffer(arena, real1, c.count, 1, c.dtype, c.seed);
        check(comm.reduce_scatter(s.addr, r.addr, c.count, c.dtype, c.rop), c, s.bad || r.bad || !valid_op);
        break;
      }
      case op_send_recv_sync:
        // Both halves null or both real (one-sided failures, which leave the
        // other half to time out, are the lone send/recv ops' business).
        p2p_send(comm, ctx, c, real0);
        p2p_recv(comm, ctx, c, real0);
        check(comm.sync(), c);
        break;
      case op_sync: check(comm.sync(), c); break;
      case op_barrier: check(comm.barrier(), c); break;
      case op_split:
      case op_group: {
        const std::size_t n = std::min<std::size_t>(c.span, calls.size() - i - 1);
        const auto slice = calls.subspan(i + 1, n);
        i += n;  // on every rank, whether it runs the slice or not
        if (c.op == op_group) {
          group(comm, ctx, c, slice, split_depth, group_depth);
        } else if (split_depth < 2) {
          split(comm, ctx, c, slice, split_depth, group_depth);
        }
        break;
      }
      case op_reduce: {
        const Rooted r = rooted(ctx, c, w, rank, 1);
        check(comm.reduce(r.local.addr, r.at_root.addr, c.count, c.dtype, c.rop, c.peer), c, r.must_fail || !valid_op);
        break;
      }
      case op_gather: {
        const Rooted r = rooted(ctx, c, w, rank, w);
        check(comm.gather(r.local.addr, r.at_root.addr, c.count, c.dtype, c.peer), c, r.must_fail);
        break;
      }
      case op_scatter: {
        const Rooted r = rooted(ctx, c, w, rank, w);
        check(comm.scatter(r.at_root.addr, r.local.addr, c.count, c.dtype, c.peer), c, r.must_fail);
        break;
      }
      case op_all_to_all: {
        Arg s, r;
        bool overlap = false;
        const auto b = bytes_of(c.count, w, c.dtype);
        if (special(c) && real0 && real1 && b && *b <= max_buffer * w) {
          std::tie(s, r) = overlapping(arena, c.count * w, c.count * w, c.dtype, c.seed);
          overlap = true;
        } else {
          s = buffer(arena, real0, c.count, w, c.dtype, c.seed);
          r = buffer(arena, real1, c.count, w, c.dtype, static_cast<std::uint8_t>(c.seed + 1));
        }
        check(comm.all_to_all(s.addr, r.addr, c.count, c.dtype), c,
              s.bad || r.bad || !known || (overlap && ranges_overlap(s, r)));
        break;
      }
      case op_all_gather_v: all_gather_v(comm, ctx, c); break;
      case op_all_to_all_v: all_to_all_v(comm, ctx, c); break;
      case op_send_recv: send_recv(comm, ctx, c); break;
      case op_group_start: check(comm.group_start(), c); break;
      case op_group_end: check(comm.group_end(), c); break;
      case op_send: p2p_send(comm, ctx, c, real0); break;
      case op_recv: p2p_recv(comm, ctx, c, real1); break;
      default: moved_from(comm, c); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_log_sink(&quiet_sink);  // drop-contract and group-destructor records: checked, not printed
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader reader{data, size};
  const std::uint8_t header = reader.u8();
  const auto calls = decode(reader);
  {
    Arena arena;  // declared first: outlives the communicator
    Ctx ctx{arena, false};
    AnyCommunicator noop{NoOp{}};
    run(noop, calls, ctx, 0, 0);
  }
  Options o;
  // Short bounds: deliberately unmatched calls wait this long, which is most
  // of the time spent per input; a spurious expiry under load is just an Error.
  o.op_timeout = std::chrono::milliseconds(200);
  o.drop_timeout = std::chrono::milliseconds(20);
  o.check_consistency = (header & 1) != 0;
  std::array<Arena, 2> arenas;  // outlive the communicators
  auto comms = Threads::create(2, o);
  if (!comms) std::abort();
  std::vector<AnyCommunicator> any;
  for (auto& c : *comms) any.emplace_back(std::move(c));
  std::array<Ctx, 2> ctx{Ctx{arenas[0], o.check_consistency}, Ctx{arenas[1], o.check_consistency}};
  std::thread peer([&] { run(any[1], calls, ctx[1], 0, 0); });
  run(any[0], calls, ctx[0], 0, 0);
  peer.join();
  any.clear();
  comms->clear();
  return 0;
}

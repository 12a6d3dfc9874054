#pragma once
// Description of one call (operation and arguments), used for error messages,
// pending-operation lists and cross-rank fingerprints. Internal.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

#include <polycoll/dtype.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/error.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail {

enum class Call : std::uint8_t {
  all_reduce, broadcast, all_gather, reduce_scatter, send, recv, sync, barrier, split,
  reduce, gather, scatter, all_to_all, all_gather_v, all_to_all_v, send_recv, group_start, group_end,
  probe,
  count_  // number of calls, for the completeness check below
};

inline constexpr std::string_view call_names[] = {
    "all_reduce", "broadcast",  "all_gather",   "reduce_scatter", "send",      "recv",
    "sync",       "barrier",    "split",        "reduce",         "gather",    "scatter",
    "all_to_all", "all_gather_v", "all_to_all_v", "send_recv",    "group_start", "group_end",
    "probe"};
static_assert(std::size(call_names) == static_cast<std::size_t>(Call::count_), "a Call without a name");

constexpr std::string_view call_name(Call c) noexcept { return call_names[static_cast<std::uint8_t>(c)]; }

inline constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

/// Trivially copyable, so building one on the hot path costs a few stores.
struct CallDesc {
  Call call = Call::sync;
  std::size_t count = npos;  // npos: the call has no count
  DType dtype = DType::U8;
  bool has_dtype = false;
  ReduceOp op = ReduceOp::Sum;
  bool has_op = false;
  std::size_t root = npos;
  std::size_t peer = npos;  // dest for send, src for recv
  std::uint32_t tag = 0;
  bool has_tag = false;
  std::uint64_t seq = 0;  // 0: not numbered
  // A reduction under Options::reproducible; set by the backends whose ranks
  // could disagree about it (Mpi) in the consistency check's fingerprint,
  // where ranks that fold differently are a mismatch.
  bool reproducible = false;

  static constexpr CallDesc reduction(Call c, std::size_t count, DType d, ReduceOp op) noexcept {
    CallDesc r{};
    r.call = c; r.count = count; r.dtype = d; r.has_dtype = true; r.op = op; r.has_op = true;
    return r;
  }
  static constexpr CallDesc movement(Call c, std::size_t count, DType d) noexcept {
    CallDesc r{};
    r.call = c; r.count = count; r.dtype = d; r.has_dtype = true;
    return r;
  }
  static constexpr CallDesc rooted(Call c, std::size_t count, DType d, std::size_t root) noexcept {
    CallDesc r = movement(c, count, d);
    r.root = root;
    return r;
  }
  static constexpr CallDesc p2p(Call c, std::size_t count, DType d, std::size_t peer, std::uint32_t tag) noexcept {
    CallDesc r = movement(c, count, d);
    r.peer = peer; r.tag = tag; r.has_tag = true;
    return r;
  }
  static constexpr CallDesc plain(Call c) noexcept {
    CallDesc r{};
    r.call = c;
    return r;
  }
};

/// True when two ranks' descriptions name the same collective call (the
/// consistency-check fingerprint: call, count, dtype, op and reproducible,
/// root, sequence number).
constexpr bool same_collective(const CallDesc& a, const CallDesc& b) noexcept {
  return a.call == b.call && a.count == b.count && a.has_dtype == b.has_dtype && (!a.has_dtype || a.dtype == b.dtype) &&
         a.has_op == b.has_op && (!a.has_op || a.op == b.op) && a.reproducible == b.reproducible &&
         a.root == b.root && a.seq == b.seq;
}

/// POLYCOLL_CHECK=1 in the environment switches the consistency check on
/// (as Options::check_consistency does) for every communicator made after it.
inline bool check_from_environment() noexcept {
  const char* v = std::getenv("POLYCOLL_CHECK");
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

/// POLYCOLL_REPRODUCIBLE=1 in the environment switches Options::reproducible
/// on for every communicator made after it (never off, as POLYCOLL_CHECK).
inline bool reproducible_from_environment() noexcept {
  const char* v = std::getenv("POLYCOLL_REPRODUCIBLE");
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

/// A collective's fingerprint as fixed-width words, for backends that compare
/// fingerprints by exchanging them (Mpi, Nccl): call, count, dtype, op (and
/// reproducible, bit 0x200 of its word), root, seq.
using Fingerprint = std::array<std::uint64_t, 6>;

constexpr Fingerprint fingerprint(const CallDesc& c) noexcept {
  return {static_cast<std::uint64_t>(c.call), static_cast<std::uint64_t>(c.count),
          c.has_dtype ? 0x100u | static_cast<std::uint64_t>(static_cast<std::uint8_t>(c.dtype)) : 0u,
          (c.has_op ? 0x100u | static_cast<std::uint64_t>(static_cast<std::uint8_t>(c.op)) : 0u) |
              (c.reproducible ? 0x200u : 0u),
          static_cast<std::uint64_t>(c.root), c.seq};
}

/// The fingerprint in two words, small enough to ride in the cache line that
/// already carries a rank's arrival (Threads' arrival line, Mpi's window
/// line), so the check costs no transfer of its own. Exact in call, count,
/// dtype, op and reproducible; the root in its low 24 bits and the sequence
/// number in its low 13. Two calls that differ only above those bits compare
/// equal: a root past 2^24 ranks, or ranks whose call numbers differ by a
/// multiple of 8192, which needs a first difference (of 1 to 8191) that the
/// check already reported. A pair that differs is a mismatch; the backend
/// then describes each side from the full CallDesc.
struct PackedFingerprint {
  std::uint64_t count;
  std::uint64_t rest;
  friend constexpr bool operator==(const PackedFingerprint&, const PackedFingerprint&) = default;
};
inline constexpr std::size_t packed_fingerprint_bytes = sizeof(PackedFingerprint);

constexpr PackedFingerprint pack_fingerprint(const CallDesc& c) noexcept {
  const Fingerprint f = fingerprint(c);
  // call: 8 bits; the dtype and op words: 9 and 10; root: 24; seq: 13.
  return {f[1], f[0] | f[2] << 8 | f[3] << 17 | (f[4] & 0xffffffu) << 27 | (f[5] & 0x1fffu) << 51};
}

/// The description a fingerprint came from (as far as same_collective and
/// describe look). A call value out of range (a peer that is not polycoll)
/// reads as sync, which never matches a collective.
constexpr CallDesc from_fingerprint(const std::uint64_t* w) noexcept {
  CallDesc c{};
  c.call = w[0] < static_cast<std::uint64_t>(Call::count_) ? static_cast<Call>(w[0]) : Call::sync;
  c.count = static_cast<std::size_t>(w[1]);
  c.has_dtype = (w[2] & 0x100u) != 0;
  c.dtype = static_cast<DType>(w[2] & 0xffu);
  c.has_op = (w[3] & 0x100u) != 0;
  c.op = static_cast<ReduceOp>(w[3] & 0xffu);
  c.reproducible = (w[3] & 0x200u) != 0;
  c.root = static_cast<std::size_t>(w[4]);
  c.seq = w[5];
  return c;
}

std::string dtype_text(DType d);

std::string op_text(ReduceOp op);

/// "all_reduce(count=1024, dtype=bf16, op=sum)"; "#7 " in front when numbered.
std::string describe(const CallDesc& c);

/// The consistency check's verdict over `w` fingerprints laid back to back in
/// `all` (rank q's at all + 6q): empty when every rank's matches `mine`, else
/// "rank q called <what>" for each rank that differs.
std::string fingerprint_diff(const std::uint64_t* all, std::size_t w, const CallDesc& mine);

/// " on rank 3 of 8 [mpi]"
std::string where(std::size_t rank, std::size_t world, std::string_view backend);

/// The one way errors about a call are spelled:
/// "all_reduce(count=1024, dtype=bf16, op=sum) on rank 3 of 8 [mpi]: <what>".
Error call_error(Errc code, const CallDesc& c, std::size_t rank, std::size_t world, std::string_view backend,
                        std::string_view what, int native = 0);

/// The error of every call on a moved-from communicator: it has no rank or
/// world, so it names neither ("rank 0 of 0").
Error moved_from_error(const CallDesc& c, std::string_view backend);

// Defined in libpolycoll (src/core.cpp), or inline with POLYCOLL_HEADER_ONLY
// (detail/linkage.hpp).
#if defined(POLYCOLL_HEADER_ONLY) || defined(POLYCOLL_DETAIL_DEFINE_CORE)

POLYCOLL_DETAIL_LIB_INLINE std::string dtype_text(DType d) {
  return is_known(d) ? std::string(name(d)) : cat("<invalid ", static_cast<unsigned>(static_cast<std::uint8_t>(d)), '>');
}

POLYCOLL_DETAIL_LIB_INLINE std::string op_text(ReduceOp op) {
  return is_known(op) ? std::string(name(op)) : cat("<invalid ", static_cast<unsigned>(static_cast<std::uint8_t>(op)), '>');
}

POLYCOLL_DETAIL_LIB_INLINE std::string describe(const CallDesc& c) {
  std::string s;
  if (c.seq != 0) s = cat('#', c.seq, ' ');
  s += call_name(c.call);
  s += '(';
  std::string_view sep;
  auto add = [&](std::string_view key, const std::string& value) {
    s += sep;
    s += key;
    s += '=';
    s += value;
    sep = ", ";
  };
  if (c.count != npos) add("count", std::to_string(c.count));
  if (c.has_dtype) add("dtype", dtype_text(c.dtype));
  if (c.has_op) add("op", op_text(c.op));
  if (c.reproducible) add("reproducible", "true");
  if (c.root != npos) add("root", std::to_string(c.root));
  // A p2p call (it has a tag) whose peer is npos received from any_source;
  // a recv or probe with tag 0xFFFFFFFF matches any_tag (polycoll's wildcards).
  const bool takes = c.call == Call::recv || c.call == Call::probe;
  if (c.peer != npos) {
    add(takes ? "src" : "dest", std::to_string(c.peer));
  } else if (c.has_tag) {
    add(takes ? "src" : "dest", "any_source");
  }
  if (c.has_tag) add("tag", takes && c.tag == 0xFFFFFFFFu ? std::string("any_tag") : std::to_string(c.tag));
  s += ')';
  return s;
}

POLYCOLL_DETAIL_LIB_INLINE std::string fingerprint_diff(const std::uint64_t* all, std::size_t w, const CallDesc& mine) {
  std::string diff;
  for (std::size_t q = 0; q < w; ++q) {
    const CallDesc other = from_fingerprint(all + std::tuple_size_v<Fingerprint> * q);
    if (!same_collective(other, mine)) diff += cat(diff.empty() ? "" : "; ", "rank ", q, " called ", describe(other));
  }
  return diff;
}

POLYCOLL_DETAIL_LIB_INLINE std::string where(std::size_t rank, std::size_t world, std::string_view backend) {
  return cat(" on rank ", rank, " of ", world, " [", backend, ']');
}

POLYCOLL_DETAIL_LIB_INLINE Error call_error(Errc code, const CallDesc& c, std::size_t rank, std::size_t world, std::string_view backend,
                        std::string_view what, int native) {
  return Error{code, cat(describe(c), where(rank, world, backend), ": ", what), native};
}

POLYCOLL_DETAIL_LIB_INLINE Error moved_from_error(const CallDesc& c, std::string_view backend) {
  return call_error(Errc::invalid_argument, c, 0, 0, backend, "moved-from communicator");
}

#endif

}  // namespace polycoll::detail

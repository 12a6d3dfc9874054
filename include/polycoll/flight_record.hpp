#pragma once
/// @file flight_record.hpp
/// The flight recorder: each communicator keeps its last calls
/// (Options::flight_record_size, default 64) in a ring that costs no
/// allocation per call. `comm.flight_record()` returns it; a call that times
/// out, and an abort under OnError::abort, write every reachable rank's ring
/// to the log sink as one block. Rules and costs: docs/reliability.md
/// ("Flight recorder").

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__linux__)
#include <time.h>
#endif

#include <polycoll/detail/call.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/error.hpp>

namespace polycoll {

/// One call of a communicator's flight record.
struct CallRecord {
  /// The communicator's calls that reached its backend, counted from 1.
  std::uint64_t number = 0;
  /// The collective's number, counted from 1 over the communicator's
  /// collective calls (barrier and split included), so equal on every rank
  /// that is in step; 0 for point-to-point, probe, sync and group calls.
  std::uint64_t collective = 0;
  /// The call and its arguments: "all_reduce(count=2, dtype=f32, op=sum)".
  std::string call;
  /// When the call began, to the resolution of the kernel's coarse
  /// monotonic clock on Linux (a scheduler tick, 1-10 ms).
  std::chrono::steady_clock::time_point start;
  /// When it returned (posted work: when it was posted; the sync that
  /// completes it has its own record); empty while it runs.
  std::optional<std::chrono::steady_clock::time_point> end;
  /// The error it returned; empty when it succeeded or still runs.
  std::optional<Errc> error;
};

namespace detail {

/// True for the calls that every rank of a communicator makes together.
constexpr bool is_collective(Call c) noexcept {
  switch (c) {
    case Call::send: case Call::recv: case Call::sync: case Call::group_start: case Call::group_end:
    case Call::probe: case Call::send_recv: case Call::count_:
      return false;
    default:
      return true;
  }
}

/// Nanoseconds of the clock the records use (CLOCK_MONOTONIC_COARSE on
/// Linux: a read of the kernel's tick time, a few ns where a precise read
/// costs tens; steady_clock, the same clock at full resolution, elsewhere).
inline std::int64_t flight_now() noexcept {
#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

/// A communicator's ring of its last calls. Written by the threads that call
/// the communicator (any number of them), read by anyone (a peer rank of
/// Threads reads it to say what a missing rank is doing): every field is an
/// atomic word and each slot is a sequence lock, so a reader never sees a
/// half-written record and a writer never waits. A slot is written again
/// only once the ring has wrapped: a thread descheduled inside begin() or
/// end() while other threads of the same communicator make as many calls as
/// the ring holds can leave one record that mixes two calls (the price of
/// not taking a lock or a second atomic read-modify-write per call).
class FlightRecorder {
 public:
  /// The most calls a ring keeps; a larger Options::flight_record_size keeps this many.
  static constexpr std::size_t max_size = std::size_t{1} << 16;

  /// Keeps the last min(size, max_size) calls (size > 0); allocates once, here.
  explicit FlightRecorder(std::size_t size);

  /// A communicator's ring for Options::flight_record_size `size`: none for
  /// 0. Throws std::bad_alloc.
  static std::unique_ptr<FlightRecorder> make(std::size_t size) {
    return size == 0 ? nullptr : std::make_unique<FlightRecorder>(size);
  }

  /// Records the start of `c`; returns the ticket end() takes. In
  /// libpolycoll (with finish(), end()'s work), not inline: inlined into
  /// every call site of every (dtype, op) they made a header-only seed TU
  /// compile 10% longer and a typed TU 5%, and the call costs nothing
  /// measurable next to the record's clock reads (docs/reliability.md).
  std::uint64_t begin(const CallDesc& c) noexcept;

  /// Records the end of the call begin() returned `k` for: succeeded when
  /// `error` is null. Nothing when the ring has wrapped over it since.
  void end(std::uint64_t k, const Error* error) noexcept {
    finish(k, error ? failed + static_cast<std::uint64_t>(error->code) : succeeded);
  }

  /// Records that the call begin() returned `k` for failed with `code`.
  void end_failed(std::uint64_t k, Errc code) noexcept { finish(k, failed + static_cast<std::uint64_t>(code)); }

  /// The last size() calls, oldest first.
  [[nodiscard]] std::vector<CallRecord> records() const;

  /// "broadcast(count=4, dtype=f32, root=0) [call 12, collective 7], running
  /// for 2.104 s": the newest record, or "no call yet".
  [[nodiscard]] std::string last_text() const;

  /// Whether a timeout of call `k` (a `c`) should write a log block: not
  /// when it is a sync() and every call since the last block was a sync()
  /// too (a loop that retries sync() after a timeout would log the same ring
  /// each time). Records the block as written when it returns true.
  [[nodiscard]] bool claim_block(std::uint64_t k, Call c) const;

  /// How many calls the ring keeps.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint64_t running = 0, succeeded = 1, failed = 2;  // failed + Errc

  struct Slot {
    std::atomic<std::uint64_t> stamp{0};  // 2k+1 while call k is written, 2k+2 once it is; 0: unused
    std::atomic<std::uint64_t> words[std::tuple_size_v<Fingerprint>] = {};
    std::atomic<std::uint64_t> peer{0};
    std::atomic<std::uint64_t> tag{0};
    std::atomic<std::int64_t> start{0};
    std::atomic<std::int64_t> end{0};
    std::atomic<std::uint64_t> status{0};
  };

  void finish(std::uint64_t k, std::uint64_t status) noexcept;

  // One consistent copy of slot `s`, or nothing (unused, being written, or
  // overwritten while read).
  std::optional<CallRecord> read(const Slot& s) const;

  std::size_t size_;
  std::size_t mask_;  // the ring's capacity (a power of two >= size_) - 1
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> collectives_{0};
  mutable std::atomic<std::uint64_t> last_block_{0};  // the call whose timeout wrote the last block
};

/// An open record: the front end's close_record() ends it with the call's
/// result and clears `recorder`; a call that leaves by an exception instead
/// ends it here, as failed (Errc::backend_failure).
struct RecordGuard {
  FlightRecorder* recorder;
  std::uint64_t ticket;
  Call call;
  RecordGuard(FlightRecorder* r, std::uint64_t k, Call c) noexcept : recorder(r), ticket(k), call(c) {}
  RecordGuard(const RecordGuard&) = delete;
  RecordGuard& operator=(const RecordGuard&) = delete;
  ~RecordGuard() {
    if (recorder != nullptr) [[unlikely]] recorder->end_failed(ticket, Errc::backend_failure);
  }
};

/// One rank's ring, for the log block.
struct RankRecorder {
  std::size_t rank;
  const FlightRecorder* recorder;
};

/// The log block: "flight record (<why>)", then for each ring in `rings`
/// "rank 0 of 2 [threads]: last 3 call(s), oldest first; ..." and one line
/// per call (docs/reliability.md shows one).
std::string flight_block(std::string_view why, const std::vector<RankRecorder>& rings, std::size_t world,
                         std::string_view backend);

/// Writes flight_block() to the log sink at level error; never throws.
void log_flight_records(std::string_view why, const std::vector<RankRecorder>& rings, std::size_t world,
                        std::string_view backend) noexcept;

}  // namespace detail

// Defined in libpolycoll (src/core.cpp), or inline with POLYCOLL_HEADER_ONLY.
}  // namespace polycoll

#if defined(POLYCOLL_HEADER_ONLY) || defined(POLYCOLL_DETAIL_DEFINE_CORE)
// What only the definitions need: a TU of the compiled mode does not parse them.
#include <algorithm>
#include <cstdio>

#include <polycoll/log.hpp>

namespace polycoll::detail {

POLYCOLL_DETAIL_LIB_INLINE FlightRecorder::FlightRecorder(std::size_t size) : size_(std::min(size, max_size)) {
  std::size_t capacity = 1;
  while (capacity < size_) capacity *= 2;
  mask_ = capacity - 1;
  slots_ = std::make_unique<Slot[]>(capacity);
}

// Not inlined with POLYCOLL_HEADER_ONLY either (see the declaration).
[[gnu::noinline]] POLYCOLL_DETAIL_LIB_INLINE std::uint64_t FlightRecorder::begin(const CallDesc& c) noexcept {
  const std::uint64_t k = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  CallDesc d = c;
  d.seq = 0;
  if (is_collective(c.call)) {
    // A load and a store, not a read-modify-write (which costs as much as
    // the rest of the record): a program calls one communicator's
    // collectives in one order on every rank, so they do not race; two
    // threads that call collectives at once may share a number.
    d.seq = collectives_.load(std::memory_order_relaxed) + 1;
    collectives_.store(d.seq, std::memory_order_relaxed);
  }
  const Fingerprint f = fingerprint(d);
  // The sequence lock without fences (ThreadSanitizer does not model
  // them): every field is stored with release, so a reader that loads a
  // field (acquire) written in this call also sees the odd stamp before it.
  // On x86-64 these are plain stores.
  Slot& s = slots_[k & mask_];
  s.stamp.store(2 * k + 1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < f.size(); ++i) s.words[i].store(f[i], std::memory_order_release);
  s.peer.store(static_cast<std::uint64_t>(c.peer), std::memory_order_release);
  s.tag.store(c.has_tag ? (std::uint64_t{1} << 32) | c.tag : 0, std::memory_order_release);
  s.start.store(flight_now(), std::memory_order_release);
  s.status.store(running, std::memory_order_release);
  s.stamp.store(2 * k + 2, std::memory_order_release);
  return k;
}

[[gnu::noinline]] POLYCOLL_DETAIL_LIB_INLINE void FlightRecorder::finish(std::uint64_t k,
                                                                        std::uint64_t status) noexcept {
  Slot& s = slots_[k & mask_];
  if (s.stamp.load(std::memory_order_relaxed) != 2 * k + 2) return;
  s.end.store(flight_now(), std::memory_order_relaxed);
  // Released: whoever reads a final status (acquire) reads this end time.
  s.status.store(status, std::memory_order_release);
}

POLYCOLL_DETAIL_LIB_INLINE std::optional<CallRecord> FlightRecorder::read(const Slot& s) const {
  const std::uint64_t before = s.stamp.load(std::memory_order_acquire);
  if (before == 0 || before % 2 != 0) return std::nullopt;
  // Acquire loads (see begin()): a field written by a later call makes the
  // stamp read after them differ from `before`.
  Fingerprint f{};
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = s.words[i].load(std::memory_order_acquire);
  const std::uint64_t peer = s.peer.load(std::memory_order_acquire);
  const std::uint64_t tag = s.tag.load(std::memory_order_acquire);
  const std::int64_t start = s.start.load(std::memory_order_acquire);
  const std::uint64_t status = s.status.load(std::memory_order_acquire);
  const std::int64_t end = s.end.load(std::memory_order_acquire);
  if (s.stamp.load(std::memory_order_relaxed) != before) return std::nullopt;

  CallDesc c = from_fingerprint(f.data());
  c.peer = static_cast<std::size_t>(peer);
  c.has_tag = (tag >> 32) != 0;
  c.tag = static_cast<std::uint32_t>(tag);
  CallRecord r;
  r.number = (before - 2) / 2;
  r.collective = c.seq;
  c.seq = 0;
  r.call = describe(c);
  using D = std::chrono::steady_clock::duration;
  r.start = std::chrono::steady_clock::time_point(std::chrono::duration_cast<D>(std::chrono::nanoseconds(start)));
  if (status != running) {
    r.end = std::chrono::steady_clock::time_point(std::chrono::duration_cast<D>(std::chrono::nanoseconds(end)));
    if (status >= failed) r.error = static_cast<Errc>(status - failed);
  }
  return r;
}

POLYCOLL_DETAIL_LIB_INLINE std::vector<CallRecord> FlightRecorder::records() const {
  std::vector<CallRecord> out;
  out.reserve(mask_ + 1);
  for (std::size_t i = 0; i <= mask_; ++i) {
    if (auto r = read(slots_[i])) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const CallRecord& a, const CallRecord& b) { return a.number < b.number; });
  if (out.size() > size_) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(size_));
  return out;
}

namespace flight {
// "1.250 s" for a duration in nanoseconds.
inline std::string seconds(std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", static_cast<double>(ns) / 1e9);
  return buf;
}

inline std::int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// "broadcast(...) [call 12, collective 7]": the call as the messages name it
// (not "#12", which error messages use for the backends' own numbers).
inline std::string head(const CallRecord& r) {
  std::string s = cat(r.call, " [call ", r.number);
  if (r.collective != 0) s += cat(", collective ", r.collective);
  s += ']';
  return s;
}
}  // namespace flight

POLYCOLL_DETAIL_LIB_INLINE std::string FlightRecorder::last_text() const {
  const std::uint64_t k = calls_.load(std::memory_order_acquire);
  if (k == 0) return "no call yet";
  const std::int64_t now = flight_now();
  // The newest call may still be being written; the one before it then stands in.
  for (std::uint64_t j = k; j > 0 && j + mask_ >= k; --j) {
    if (auto r = read(slots_[j & mask_]); r && r->number == j) {
      std::string s = flight::head(*r);
      if (!r->end) return cat(s, ", running for ", flight::seconds(now - flight::ns_of(r->start)));
      return cat(s, r->error ? cat(", failed (", to_string(*r->error), ')') : std::string(", returned"), ' ',
                 flight::seconds(now - flight::ns_of(*r->end)), " ago");
    }
  }
  return cat("call ", k, " (being recorded)");
}

POLYCOLL_DETAIL_LIB_INLINE bool FlightRecorder::claim_block(std::uint64_t k, Call c) const {
  const std::uint64_t last = last_block_.load(std::memory_order_acquire);
  if (c == Call::sync && last != 0) {
    bool only_syncs = true;
    for (const CallRecord& r : records()) {
      if (r.number > last && r.number <= k && r.call != "sync()") only_syncs = false;
    }
    // A record pushed out of the ring was a call too: the ring no longer
    // holds everything since the last block, so it is worth writing.
    if (only_syncs && k - last < size_) return false;
  }
  last_block_.store(k, std::memory_order_release);
  return true;
}

POLYCOLL_DETAIL_LIB_INLINE std::string flight_block(std::string_view why, const std::vector<RankRecorder>& rings,
                                                    std::size_t world, std::string_view backend) {
  std::string s = cat("flight record (", why, ")");
  for (const RankRecorder& rr : rings) {
    const std::vector<CallRecord> rec = rr.recorder->records();
    const std::int64_t now = flight_now();  // after the read: no call starts after it
    s += cat("\n  rank ", rr.rank, " of ", world, " [", backend, "]: last ", rec.size(),
             " call(s), oldest first; times are seconds before now");
    for (const CallRecord& r : rec) {
      s += cat("\n    ", flight::head(r), "  started ", flight::seconds(now - flight::ns_of(r.start)));
      if (!r.end) {
        s += ", running";
      } else {
        s += cat(", ended ", flight::seconds(now - flight::ns_of(*r.end)),
                 r.error ? cat(", failed (", to_string(*r.error), ')') : std::string(", ok"));
      }
    }
  }
  return s;
}

POLYCOLL_DETAIL_LIB_INLINE void log_flight_records(std::string_view why, const std::vector<RankRecorder>& rings,
                                                   std::size_t world, std::string_view backend) noexcept {
  try {
    log(LogLevel::error, flight_block(why, rings, world, backend));
  } catch (...) {
    // Out of memory while reporting: the call's own Error still says what happened.
  }
}

}  // namespace polycoll::detail
#endif
